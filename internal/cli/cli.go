// Package cli holds what the benchmark commands share at the terminal:
// comma-separated list flags and a progress line.
package cli

import (
	"fmt"
	"io"
	"os"
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
