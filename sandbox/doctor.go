package sandbox

import (
	"context"
	"fmt"
	"io"
)

// Check is one line of the doctor's report.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // "available", "degraded", "missing"
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// DoctorReport is the result of [Doctor]: one [Check] per protection.
type DoctorReport struct {
	Checks []Check `json:"checks"`
}

// Doctor checks this host for every protection tent uses.
func Doctor(ctx context.Context) *DoctorReport {
	return &DoctorReport{}
}

// WriteText prints one line per check (aligned: name, status, detail) and an
// indented "fix:" line where set.
func (r *DoctorReport) WriteText(w io.Writer) error {
	for _, c := range r.Checks {
		if _, err := fmt.Fprintf(w, "%-20s %-10s %s\n", c.Name, c.Status, c.Detail); err != nil {
			return err
		}
		if c.Fix != "" {
			if _, err := fmt.Fprintf(w, "%20s fix: %s\n", "", c.Fix); err != nil {
				return err
			}
		}
	}
	return nil
}
