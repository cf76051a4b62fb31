package train

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// MLP is a multi-layer perceptron: fully connected layers with ReLU
// between them and a softmax cross-entropy loss on the last. Its
// parameters live in one flat vector (see Layout), so that they can be cut
// into blocks for the servers without copying.
type MLP struct {
	Sizes []int // units per layer, input first: 784, 1024, 256, 10
}

// NewMLP checks sizes (at least an input and an output layer, every one
// positive).
func NewMLP(sizes []int) (MLP, error) {
	if len(sizes) < 2 {
		return MLP{}, fmt.Errorf("model %v: need at least an input and an output layer", sizes)
	}
	for _, n := range sizes {
		if n < 1 {
			return MLP{}, fmt.Errorf("model %v: every layer needs at least one unit", sizes)
		}
	}
	return MLP{Sizes: append([]int(nil), sizes...)}, nil
}

// Layer is where one layer's parameters are in the flat vector: the
// weights W, In rows of Out (row-major: W[i*Out+j] connects input i to
// output j), then the Out biases.
type Layer struct {
	In, Out int
	W, B    int // offsets of the weights and the biases
}

// Layers is the layout of the flat parameter vector, layer by layer.
func (m MLP) Layers() []Layer {
	var ls []Layer
	off := 0
	for l := 1; l < len(m.Sizes); l++ {
		in, out := m.Sizes[l-1], m.Sizes[l]
		ls = append(ls, Layer{In: in, Out: out, W: off, B: off + in*out})
		off += in*out + out
	}
	return ls
}

// NumParams is the length of the flat parameter vector.
func (m MLP) NumParams() int {
	n := 0
	for _, l := range m.Layers() {
		n += l.In*l.Out + l.Out
	}
	return n
}

// Init fills params with He-initialised weights (normal, standard
// deviation sqrt(2/fan-in)) drawn from seed, and zero biases.
func (m MLP) Init(params []float32, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6d6c70))
	for _, l := range m.Layers() {
		sd := math.Sqrt(2 / float64(l.In))
		w := params[l.W : l.W+l.In*l.Out]
		for i := range w {
			w[i] = float32(r.NormFloat64() * sd)
		}
		clear(params[l.B : l.B+l.Out])
	}
}

// Workspace holds the buffers of forward and backward passes over batches
// of up to Batch samples, so that a training step allocates nothing. A
// workspace is used by one goroutine at a time.
type Workspace struct {
	m      MLP
	layers []Layer
	batch  int
	acts   [][]float32 // acts[l]: batch x Sizes[l+1], post-ReLU (logits for the last)
	deltas [][]float32 // deltas[l]: dLoss/d(pre-activation) of layer l's outputs
}

// NewWorkspace makes buffers for batches of up to batch samples.
func (m MLP) NewWorkspace(batch int) *Workspace {
	ws := &Workspace{m: m, layers: m.Layers(), batch: batch}
	for _, l := range ws.layers {
		ws.acts = append(ws.acts, make([]float32, batch*l.Out))
		ws.deltas = append(ws.deltas, make([]float32, batch*l.Out))
	}
	return ws
}

// forward computes every layer's activations for the n samples of x (n
// rows of Sizes[0]); the last layer's are the logits.
func (ws *Workspace) forward(params, x []float32, n int) {
	in := x[:n*ws.layers[0].In]
	for li, l := range ws.layers {
		out := ws.acts[li][:n*l.Out]
		b := params[l.B : l.B+l.Out]
		for s := range n {
			copy(out[s*l.Out:(s+1)*l.Out], b)
		}
		// Row-outer: every weight row is read once per batch and added
		// to the outputs of the samples whose input is non-zero (MNIST's
		// pixels and ReLU outputs are mostly zeros).
		for i := range l.In {
			w := params[l.W+i*l.Out : l.W+(i+1)*l.Out]
			for s := range n {
				if a := in[s*l.In+i]; a != 0 {
					axpy(a, w, out[s*l.Out:(s+1)*l.Out])
				}
			}
		}
		if li < len(ws.layers)-1 {
			relu(out)
		}
		in = out
	}
}

// lossAndDelta turns the logits of n samples into the mean softmax
// cross-entropy loss against labels, and leaves dLoss/dlogits in the last
// layer's deltas.
func (ws *Workspace) lossAndDelta(labels []uint8, n int) float64 {
	last := len(ws.layers) - 1
	k := ws.layers[last].Out
	logits, delta := ws.acts[last], ws.deltas[last]
	loss := 0.0
	inv := 1 / float32(n)
	for s := range n {
		z, d := logits[s*k:(s+1)*k], delta[s*k:(s+1)*k]
		mx := z[0]
		for _, v := range z[1:] {
			mx = max(mx, v)
		}
		sum := 0.0
		for j, v := range z {
			e := math.Exp(float64(v - mx))
			d[j] = float32(e)
			sum += e
		}
		y := int(labels[s])
		loss += math.Log(sum) - float64(z[y]-mx)
		for j := range d {
			d[j] = d[j] / float32(sum) * inv
		}
		d[y] -= inv
	}
	return loss / float64(n)
}

// Step computes the mean loss of the n samples of x with labels, and
// writes its gradient with respect to params into grad (overwriting it).
func (ws *Workspace) Step(params, grad, x []float32, labels []uint8, n int) float64 {
	if n > ws.batch {
		panic(fmt.Sprintf("train: batch of %d samples in a workspace for %d", n, ws.batch))
	}
	ws.forward(params, x, n)
	loss := ws.lossAndDelta(labels, n)
	for li := len(ws.layers) - 1; li >= 0; li-- {
		l := ws.layers[li]
		delta := ws.deltas[li][:n*l.Out]
		var in, down []float32 // the layer's input; the delta of the layer below, when there is one
		if li == 0 {
			in = x[:n*l.In]
		} else {
			in = ws.acts[li-1][:n*l.In]
			down = ws.deltas[li-1][:n*l.In]
			clear(down)
		}
		gb := grad[l.B : l.B+l.Out]
		clear(gb)
		for s := range n {
			add(delta[s*l.Out:(s+1)*l.Out], gb)
		}
		// One pass over the weight rows: the weight gradient of row i, and
		// the delta of input i (zero where the ReLU was off, so skipped).
		for i := range l.In {
			gw := grad[l.W+i*l.Out : l.W+(i+1)*l.Out]
			clear(gw)
			w := params[l.W+i*l.Out : l.W+(i+1)*l.Out]
			for s := range n {
				a := in[s*l.In+i]
				if a == 0 {
					continue
				}
				d := delta[s*l.Out : (s+1)*l.Out]
				axpy(a, d, gw)
				if down != nil {
					down[s*l.In+i] = dot(w, d)
				}
			}
		}
	}
	return loss
}

// Predict writes the predicted class of each of the n samples of x into
// out.
func (ws *Workspace) Predict(params, x []float32, n int, out []uint8) {
	ws.forward(params, x, n)
	last := len(ws.layers) - 1
	k := ws.layers[last].Out
	for s := range n {
		z := ws.acts[last][s*k : (s+1)*k]
		best := 0
		for j, v := range z {
			if v > z[best] {
				best = j
			}
		}
		out[s] = uint8(best)
	}
}

// axpy is y += a*x, for len(x) elements. The loop is unrolled by four
// (the compiler does not vectorise; unrolling lets it keep the adds
// independent) and the re-slicing removes the bounds checks.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		ys[0] += a * xs[0]
		ys[1] += a * xs[1]
		ys[2] += a * xs[2]
		ys[3] += a * xs[3]
	}
	for ; i < len(x); i++ {
		y[i] += a * x[i]
	}
}

// dot is the dot product of x and y[:len(x)], with four partial sums.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 += xs[0] * ys[0]
		s1 += xs[1] * ys[1]
		s2 += xs[2] * ys[2]
		s3 += xs[3] * ys[3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// add is y += x.
func add(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += v
	}
}

func relu(x []float32) {
	for i, v := range x {
		if v < 0 {
			x[i] = 0
		}
	}
}
