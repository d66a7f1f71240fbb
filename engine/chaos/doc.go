// Package chaos holds the chaos run (chaos_envtest_test.go): a real multi-process cluster under a
// checked load while a seeded nemesis kills and pauses processes and moves and splits regions,
// with the history checked linearizable afterwards. `make test` runs a short run in its envtest
// stage; `make chaos` the long one. Results: docs/chaos.md.
package chaos
