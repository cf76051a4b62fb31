package postoffice_test

import (
	"fmt"

	"github.com/elasticps/elasticps/message"
	zmq4 "github.com/pebbe/zmq4"
)

// rawDealer is a plain ZeroMQ DEALER to node n, for sending arbitrary frames.
func rawDealer(n message.Node) (*zmq4.Socket, error) {
	s, err := zmq4.NewSocket(zmq4.DEALER)
	if err != nil {
		return nil, err
	}
	_ = s.SetLinger(0)
	_ = s.SetIdentity("ps99")
	if err := s.Connect(fmt.Sprintf("tcp://%s:%d", n.Hostname, n.Port)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
