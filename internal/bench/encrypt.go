package bench

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// encryptedKind is the Go nodes with PS_ENCRYPT=on (CURVE on zmq, TLS on
// tcp), their keys derived from a token made up for the run.
func encryptedKind() (NodeKind, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return NodeKind{}, fmt.Errorf("bench: a token for --encrypt: %w", err)
	}
	return NodeKind{Label: EncryptedLabel, Env: []string{"PS_ENCRYPT=on", "PS_AUTH_TOKEN=" + hex.EncodeToString(b[:])}}, nil
}
