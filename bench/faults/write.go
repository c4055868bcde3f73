package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write saves the report as results.json and results.md in dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Markdown()), 0o644)
}

// Markdown renders the report: the run, one table row per scenario, then each scenario's
// criteria and details.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fault suite (`bench faults`)\n\n")
	engine := strings.ToUpper(r.Engine)
	if r.CostProfile != "" {
		engine += " (cost profile " + r.CostProfile + ")"
	}
	fmt.Fprintf(&b, "- started %s, wall %.0f s", r.StartedAt.Format("2006-01-02 15:04 UTC"), r.WallSec)
	if r.Quick {
		b.WriteString(" (**--quick**: every scenario shortened)")
	}
	b.WriteString("\n")
	if r.Command != "" {
		fmt.Fprintf(&b, "- command: `%s`\n", r.Command)
	}
	fmt.Fprintf(&b, "- machine: %s\n", r.Machine)
	proxy := "proxy defaults"
	if r.ProxyConfig != "" {
		proxy = "proxy defaults under `" + r.ProxyConfig + "`"
	}
	fmt.Fprintf(&b, "- cluster: %d %s nodes (fault injection on), %s, SLO %.0f ms, workload `%s`\n", r.Nodes, engine, proxy, r.SLOms, r.Workload)
	fmt.Fprintf(&b, "- capacity %.2f req/s: %s\n", r.CapacityRPS, r.CapacityMethod)
	fmt.Fprintf(&b, "- **%d passed, %d failed, %d skipped**\n\n", r.Passed, r.Failed, r.Skipped)

	b.WriteString("| scenario | verdict | requests | failed (by kind) | p50 / p99 ms | goodput ≤ SLO | scenario figures |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, x := range r.Results {
		req, failed, lat, good := "–", "–", "–", "–"
		if x.HasLoad {
			req = fmt.Sprintf("%d at %.1f/s", x.Requests, x.RateRPS)
			failed = fmt.Sprint(x.Failed)
			if len(x.FailedBy) > 0 {
				failed += " (" + kinds(x.FailedBy) + ")"
			}
			if x.OK > 0 {
				lat = fmt.Sprintf("%.0f / %.0f", x.P50ms, x.P99ms)
			}
			good = fmt.Sprintf("%.1f %%", 100*x.Goodput)
		}
		figs := x.ownFigures()
		if x.Verdict == Skip {
			figs = strings.Join(x.Reasons, "; ")
		}
		fmt.Fprintf(&b, "| %s | **%s** | %s | %s | %s | %s | %s |\n", x.Name, x.Verdict, req, failed, lat, good, mdEscape(figs))
	}
	b.WriteString("\n## Scenarios\n")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "\n### %s — %s\n\n%s\n\n", x.Name, x.Verdict, x.Goal)
		if len(x.Criteria) > 0 {
			var cs []string
			for _, c := range x.Criteria {
				s := "`" + c.String() + "`"
				if c.Optional {
					s += " (when measured)"
				}
				cs = append(cs, s)
			}
			fmt.Fprintf(&b, "- criteria: %s\n", strings.Join(cs, ", "))
		}
		for _, s := range x.Reasons {
			fmt.Fprintf(&b, "- **%s**\n", mdEscape(s))
		}
		for _, s := range x.NotJudged {
			fmt.Fprintf(&b, "- not judged: %s\n", mdEscape(s))
		}
		if x.HasLoad || len(x.Figures) > 0 {
			fmt.Fprintf(&b, "- figures: %s\n", mdEscape(x.FiguresText()))
		}
		for _, d := range x.Details {
			fmt.Fprintf(&b, "- %s\n", mdEscape(d))
		}
		fmt.Fprintf(&b, "- wall %.1f s\n", x.WallSec)
	}
	return b.String()
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
