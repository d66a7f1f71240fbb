package function

// SetTimeLimits turns the deadline checks of modules loaded afterwards on or off (benchmarks).
func SetTimeLimits(on bool) { enforceTimeLimits = on }
