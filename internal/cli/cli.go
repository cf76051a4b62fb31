// Package cli holds what the benchmark commands share at the terminal:
// comma-separated list flags and a progress line.
package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
)

// SplitList splits a comma-separated flag value, trimming spaces and
// dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Progress keeps one status line on a terminal. Elsewhere Update and Done
// print nothing, so that redirected output stays clean, and Starting and
// Finished print a line each. Its methods may be called from several
// goroutines.
type Progress struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	last string
}

// NewProgress writes to f, which is a terminal or not.
func NewProgress(f *os.File) *Progress {
	fi, err := f.Stat()
	return &Progress{w: f, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

// Update replaces the status line with s.
func (p *Progress) Update(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty || s == p.last {
		return
	}
	p.last = s
	fmt.Fprintf(p.w, "\r\033[K%s", s)
}

// Starting announces a step by its label where no status line is kept.
func (p *Progress) Starting(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintf(p.w, "%s ...\n", label)
	}
}

// Finished prints s as a line that stays.
func (p *Progress) Finished(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", s)
		p.last = ""
		return
	}
	fmt.Fprintln(p.w, s)
}

// Done clears the status line.
func (p *Progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.last != "" {
		fmt.Fprint(p.w, "\r\033[K")
		p.last = ""
	}
}

// FormatNum formats a table cell: whole numbers from 100 on, one decimal
// from 10, two below; "-" for NaN and infinities (no value).
func FormatNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// LastLines returns the last n lines of s (a failed node's log tail).
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
