package metrics

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is an HTTP endpoint serving a Registry: GET /metrics (promhttp, in
// the format the scraper asks for) and GET /healthz answering "ok".
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Serve listens on addr (host:port; port 0 picks a free one, so ":0" and
// "127.0.0.1:0" work) and serves r until Close. It returns once the listener
// is bound, so Addr is ready for a scraper or a test. log receives serve
// errors; nil means slog.Default().
func Serve(addr string, r *Registry, log *slog.Logger) (*Server, error) {
	if r == nil {
		return nil, errors.New("metrics: Serve: nil registry")
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: cannot listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// A collector that fails (say, /proc unreadable) must not hide the
		// node's own series; the failure is logged.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	s := &Server{
		srv: &http.Server{
			Handler: mux,
			// A scraper that stalls must not pin a goroutine and a socket
			// forever; scrapes are small, so these are generous.
			ReadHeaderTimeout: 10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "addr", s.addr, "err", err)
		}
	}()
	log.Debug("metrics endpoint listening", "addr", s.addr)
	return s, nil
}

// Addr is the bound address, host:port.
func (s *Server) Addr() string { return s.addr }

// Close stops the server at once, closing open scrapes, and waits for its
// goroutine to end. It is safe to call more than once.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}
