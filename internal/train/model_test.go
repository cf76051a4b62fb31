package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayoutShapes(t *testing.T) {
	m, err := NewMLP([]int{784, 1024, 256, 10})
	require.NoError(t, err)
	assert.Equal(t, []Layer{
		{In: 784, Out: 1024, W: 0, B: 802816},
		{In: 1024, Out: 256, W: 803840, B: 1065984},
		{In: 256, Out: 10, W: 1066240, B: 1068800},
	}, m.Layers())
	assert.Equal(t, 1068810, m.NumParams())

	_, err = NewMLP([]int{784})
	assert.ErrorContains(t, err, "at least an input and an output layer")
	_, err = NewMLP([]int{784, 0, 10})
	assert.ErrorContains(t, err, "at least one unit")
}

func TestInitIsSeededHeAndZeroBias(t *testing.T) {
	m, err := NewMLP([]int{400, 300, 10})
	require.NoError(t, err)
	a, b, c := make([]float32, m.NumParams()), make([]float32, m.NumParams()), make([]float32, m.NumParams())
	m.Init(a, 7)
	m.Init(b, 7)
	m.Init(c, 8)
	assert.Equal(t, a, b, "same seed, same weights")
	assert.NotEqual(t, a, c)
	l := m.Layers()[0]
	assert.Equal(t, make([]float32, l.Out), a[l.B:l.B+l.Out], "biases start at zero")
	var ss float64
	for _, v := range a[l.W : l.W+l.In*l.Out] {
		ss += float64(v) * float64(v)
	}
	sd := math.Sqrt(ss / float64(l.In*l.Out))
	assert.InDelta(t, math.Sqrt(2.0/400), sd, 0.002, "He initialisation: sd sqrt(2/fan-in)")
}

// TestGradientMatchesFiniteDifferences checks Step's gradient of every
// parameter of a tiny MLP against central differences of its loss.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	m, err := NewMLP([]int{6, 5, 4, 3})
	require.NoError(t, err)
	params := make([]float32, m.NumParams())
	m.Init(params, 3)
	r := rand.New(rand.NewPCG(1, 2))
	for _, l := range m.Layers() { // non-zero biases, so that they matter
		for j := range l.Out {
			params[l.B+j] = float32(r.NormFloat64() * 0.1)
		}
	}
	const n = 4
	x := make([]float32, n*6)
	for i := range x {
		if i%3 != 0 { // some zero inputs, as MNIST has
			x[i] = float32(r.Float64())
		}
	}
	labels := []uint8{0, 2, 1, 2}
	ws := m.NewWorkspace(n)
	grad := make([]float32, len(params))
	ws.Step(params, grad, x, labels, n)

	loss := func() float64 {
		ws.forward(params, x, n)
		return ws.lossAndDelta(labels, n)
	}
	const eps = 1e-2
	for i := range params {
		p := params[i]
		params[i] = p + eps
		up := loss()
		params[i] = p - eps
		down := loss()
		params[i] = p
		num := (up - down) / (2 * eps)
		assert.InDelta(t, num, float64(grad[i]), 2e-3+0.02*math.Abs(num), "parameter %d", i)
	}
}

func TestStepOverwritesGradientAndLearns(t *testing.T) {
	m, err := NewMLP([]int{8, 16, 4})
	require.NoError(t, err)
	params := make([]float32, m.NumParams())
	m.Init(params, 1)
	const n = 16
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, n*8)
	labels := make([]uint8, n)
	for s := range n {
		labels[s] = uint8(s % 4)
		x[s*8+2*(s%4)] = 1 // the class is which pair of inputs is on
		x[s*8+2*(s%4)+1] = float32(r.Float64())
	}
	ws := m.NewWorkspace(n)
	grad := make([]float32, len(params))
	for i := range grad {
		grad[i] = 1e9 // Step must overwrite, not add
	}
	first := ws.Step(params, grad, x, labels, n)
	for range 200 {
		for i, g := range grad {
			params[i] -= 0.5 * g
		}
		ws.Step(params, grad, x, labels, n)
	}
	last := ws.Step(params, grad, x, labels, n)
	assert.Less(t, last, first/10, "SGD on a separable toy set drives the loss down")
	pred := make([]uint8, n)
	ws.Predict(params, x, n, pred)
	assert.Equal(t, labels, pred)
}

func TestStepAllocatesNothing(t *testing.T) {
	m, err := NewMLP([]int{784, 64, 10})
	require.NoError(t, err)
	params := make([]float32, m.NumParams())
	m.Init(params, 1)
	ws := m.NewWorkspace(8)
	grad := make([]float32, len(params))
	x := make([]float32, 8*784)
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	labels := make([]uint8, 8)
	allocs := testing.AllocsPerRun(5, func() { ws.Step(params, grad, x, labels, 8) })
	assert.Zero(t, allocs)
}

func BenchmarkStep(b *testing.B) {
	m, _ := NewMLP([]int{784, 1024, 256, 10})
	params := make([]float32, m.NumParams())
	m.Init(params, 1)
	d, err := loadTestMNIST(b, 64)
	require.NoError(b, err)
	ws := m.NewWorkspace(32)
	grad := make([]float32, len(params))
	b.ResetTimer()
	for range b.N {
		ws.Step(params, grad, d.X, d.Y, 32)
	}
}

func loadTestMNIST(tb testing.TB, limit int) (Dataset, error) {
	tb.Helper()
	dir, err := FindMNIST("")
	if err != nil {
		return Dataset{}, err
	}
	return LoadMNIST(dir, true, limit)
}
