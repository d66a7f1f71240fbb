package telemetry

import (
	"fmt"
	"html/template"
	"time"
)

// What the master's and region servers' status pages share: the page's head (title, inline
// style; no external assets) and the template functions.

// PageHead defines the templates "head" (the page's start: {{template "head" .Title}}) and
// "tail" (the recent warnings and errors, and the page's end: {{template "tail" .Recent}}).
const PageHead = `{{define "head"}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.25em 0.7em; text-align: left; border-bottom: 1px solid #eee; }
th { background: #f3f3f3; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.err { color: #a00; } .muted { color: #777; }
nav a { margin-right: 1em; }
</style>
</head>{{end}}{{define "tail"}}<h2>Recent warnings and errors</h2>
{{if .}}<table id="recent"><tr><th>Time</th><th>Level</th><th>Message</th><th>Details</th></tr>
{{range .}}<tr><td>{{time .Time}}</td><td>{{.Level}}</td><td>{{.Message}}{{if gt .Count 1}} <span class="muted">(&times;{{.Count}})</span>{{end}}</td><td>{{.Attrs}}</td></tr>{{end}}
</table>{{else}}<p class="muted" id="recent">None since the process started.</p>{{end}}
</body>
</html>{{end}}`

// PageFuncs are the status pages' template functions: bytes (1.5 MiB), time (UTC), key (a row key
// as the shell prints it), ago (milliseconds as a duration) and pct.
func PageFuncs() template.FuncMap {
	return template.FuncMap{
		"bytes": FormatBytes,
		"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"key":   PrintableKey,
		"ago":   func(ms int64) string { return (time.Duration(ms) * time.Millisecond).Round(time.Second).String() },
		"pct": func(a, b int64) string {
			if b <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
		},
	}
}

// PrintableKey shows a row key as the shell does: printable bytes as they are, others as \xNN.
func PrintableKey(b []byte) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '\\' {
			out = append(out, c)
		} else {
			out = fmt.Appendf(out, `\x%02X`, c)
		}
	}
	return string(out)
}

// FormatBytes is a byte count in binary units (1.5 MiB).
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
