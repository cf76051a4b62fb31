package postoffice

import (
	"github.com/elasticps/elasticps/van"
)

// encryptionFromEnv reads PS_ENCRYPT and the key-file variables: nil when
// encryption is off (the default). On, the vans derive their keys from the
// job's token unless key files are given, so one of the two is required.
func encryptionFromEnv(get func(string) string, token, vanType string) (*van.Encryption, error) {
	enc := &van.Encryption{
		Secret:             []byte(token),
		CurveSecretKeyFile: get("PS_CURVE_SECRET_KEY_FILE"),
		TLSCertFile:        get("PS_TLS_CERT_FILE"),
		TLSKeyFile:         get("PS_TLS_KEY_FILE"),
		TLSCAFile:          get("PS_TLS_CA_FILE"),
	}
	files := map[string]string{"PS_CURVE_SECRET_KEY_FILE": enc.CurveSecretKeyFile,
		"PS_TLS_CERT_FILE": enc.TLSCertFile, "PS_TLS_KEY_FILE": enc.TLSKeyFile, "PS_TLS_CA_FILE": enc.TLSCAFile}
	switch v := get("PS_ENCRYPT"); v {
	case "", "off", "0", "false":
		for name, f := range files {
			if f != "" {
				return nil, &EnvError{Var: "PS_ENCRYPT", Value: v,
					Want: "on, since " + name + " is set and only encryption reads it (or unset " + name + ")"}
			}
		}
		return nil, nil
	case "on", "1", "true":
	default:
		return nil, &EnvError{Var: "PS_ENCRYPT", Value: v, Want: "off (the default) or on"}
	}
	keyFiles := enc.CurveSecretKeyFile != ""
	if vanType == "tcp" {
		keyFiles = enc.TLSCertFile != ""
	}
	if token == "" && !keyFiles {
		return nil, &EnvError{Var: "PS_AUTH_TOKEN", Want: "the job's token (or PS_AUTH_TOKEN_FILE): PS_ENCRYPT=on derives the keys from it, unless PS_CURVE_SECRET_KEY_FILE (zmq van) or PS_TLS_CERT_FILE, PS_TLS_KEY_FILE and PS_TLS_CA_FILE (tcp van) are given"}
	}
	return enc, nil
}
