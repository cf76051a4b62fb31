package porttest

import (
	"fmt"
	"net"
	"testing"
)

// listenOn binds 127.0.0.1:port, as a node's transport does.
func listenOn(port int) (net.Listener, error) {
	return net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
}

func TestStartRetryingStartsAgainAfterAPortClash(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ports := []int{held.Addr().(*net.TCPAddr).Port} // the first start gets a taken port
	starts, stops := 0, 0
	l := StartRetrying(t, func() (net.Listener, error) {
		starts++
		port := Free(t)
		if starts <= len(ports) {
			port = ports[starts-1]
		}
		return listenOn(port)
	}, func(net.Listener) { stops++ })
	defer l.Close()
	if starts != 2 || stops != 1 {
		t.Fatalf("%d starts and %d stops, want 2 and 1", starts, stops)
	}
}

// fatalRecorder stops StartRetrying at its Fatal, as testing.T does, and
// keeps the message.
type fatalRecorder struct {
	testing.TB
	fatal string
}

type stopped struct{}

func (r *fatalRecorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	panic(stopped{})
}

func TestStartRetryingGivesUp(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		name                  string
		start                 func() (net.Listener, error)
		wantStarts, wantStops int
	}{
		{"port always taken", func() (net.Listener, error) { return listenOn(port) }, attempts, attempts - 1},
		{"another error", func() (net.Listener, error) { return nil, fmt.Errorf("scheduler unreachable") }, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &fatalRecorder{TB: t}
			starts, stops := 0, 0
			func() {
				defer func() {
					if p := recover(); p != nil && p != (stopped{}) {
						panic(p)
					}
				}()
				StartRetrying(r, func() (net.Listener, error) { starts++; return c.start() }, func(net.Listener) { stops++ })
			}()
			if r.fatal == "" {
				t.Fatal("StartRetrying returned instead of failing the test")
			}
			if starts != c.wantStarts || stops != c.wantStops {
				t.Fatalf("%d starts and %d stops, want %d and %d (failure: %s)", starts, stops, c.wantStarts, c.wantStops, r.fatal)
			}
		})
	}
}
