package launcher

import (
	"bufio"
	"errors"
	"io"
	"sync"
	"syscall"
)

// maxLine bounds how much of one line is buffered before it is written out
// anyway. A child that prints megabytes without a newline must not make the
// launcher's memory grow without bound; such a line is emitted in pieces,
// each on its own prefixed line.
const maxLine = 64 << 10

// lineOutput serializes whole lines from many children onto the job's
// writers. One mutex covers both Stdout and Stderr because they are often
// the same writer (a terminal, or one buffer in tests), and comparing
// arbitrary io.Writers to find out is not possible in general.
type lineOutput struct {
	mu sync.Mutex
	// onBroken, if set, is called (with mu held) the first time a sink
	// turns out to be a broken pipe.
	onBroken func(s *sink)
}

// sink is one of the job's writers. Once a write fails with EPIPE (the
// reader is gone, as with `elasticps local ... | head`) nothing more is
// written to it: the job runs on, its lines are dropped.
type sink struct {
	w      io.Writer
	name   string // "stdout" or "stderr", for the launcher's note
	broken bool   // guarded by lineOutput.mu
}

// write writes one line to s unless s is broken; o.mu must be held.
func (o *lineOutput) write(s *sink, line []byte) {
	if s.broken {
		return
	}
	if _, err := s.w.Write(line); errors.Is(err, syscall.EPIPE) {
		s.broken = true
		if o.onBroken != nil {
			o.onBroken(s)
		}
	}
}

// copyLines copies r to s one line at a time, each line written with a
// single Write of prefix()+line so lines from different processes never
// mix. prefix is asked for every line, so a prefix that changes while the
// child runs (its rank becomes known) applies from the next line on. A last
// line without a newline (the child died mid-line or just did not end its
// output with one) gets a newline added so that the next line from someone
// else starts on a line of its own.
//
// Write errors do not stop the reading: the child must keep being drained
// or it would block on a full pipe, and a broken output should not be what
// kills the job.
func (o *lineOutput) copyLines(s *sink, r io.Reader, prefix func() string) {
	br := bufio.NewReaderSize(r, maxLine)
	buf := make([]byte, 0, 256)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			buf = append(buf[:0], prefix()...)
			buf = append(buf, line...)
			if buf[len(buf)-1] != '\n' {
				buf = append(buf, '\n')
			}
			o.mu.Lock()
			o.write(s, buf)
			o.mu.Unlock()
		}
		switch err {
		case nil, bufio.ErrBufferFull:
			continue
		default:
			// io.EOF when the last writer closed the pipe, or
			// os.ErrClosed when Run gave up waiting for it.
			return
		}
	}
}
