package launcher

import (
	"bufio"
	"io"
	"sync"
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
}

// copyLines copies r to w one line at a time, each line written with a
// single Write of prefix+line so lines from different processes never mix.
// A last line without a newline (the child died mid-line or just did not
// end its output with one) gets a newline added so that the next line from
// someone else starts on a line of its own.
//
// Write errors are ignored and reading continues: the child must keep
// being drained or it would block on a full pipe, and a broken output
// should not be what kills the job.
func (o *lineOutput) copyLines(w io.Writer, r io.Reader, prefix string) {
	br := bufio.NewReaderSize(r, maxLine)
	buf := make([]byte, 0, len(prefix)+256)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			buf = append(buf[:0], prefix...)
			buf = append(buf, line...)
			if buf[len(buf)-1] != '\n' {
				buf = append(buf, '\n')
			}
			o.mu.Lock()
			_, _ = w.Write(buf)
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
