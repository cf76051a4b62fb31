package straggler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// This file holds the model side of 'elasticps bench straggler': the
// ResNet-50 parameter tensors, the two hash placements the PSLD paper
// blames for load imbalance (MXNet's and BytePS's), and the oracle
// placement that knows every server's true speed.

// tensor is one learnable parameter tensor.
type tensor struct {
	Name  string
	Shape []int
	Elems int
}

// resNet50 lists ResNet-50's learnable tensors in declaration order
// (the order MXNet and BytePS number their keys): the 7x7 stem, sixteen
// bottleneck blocks in four stages of 3, 4, 6 and 3 blocks (widths 64, 128,
// 256, 512; expansion 4; a 1x1 projection on the first block of each stage),
// and the 1000-way classifier. Every convolution has no bias and is
// followed by batch norm (gamma and beta). That is 53 convolutions, 53
// batch norms and the fc weight and bias: 161 tensors, 25,557,032
// parameters. (Batch norm's running mean and variance are not trained and
// are not pushed.)
func resNet50() []tensor {
	var ts []tensor
	add := func(name string, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		ts = append(ts, tensor{Name: name, Shape: shape, Elems: n})
	}
	conv := func(name string, out, in, k int) {
		add(name+".weight", out, in, k, k)
	}
	bn := func(name string, c int) {
		add(name+".gamma", c)
		add(name+".beta", c)
	}
	conv("conv1", 64, 3, 7)
	bn("bn1", 64)
	in := 64
	for s, stage := range []struct{ blocks, width int }{{3, 64}, {4, 128}, {6, 256}, {3, 512}} {
		out := stage.width * 4
		for b := range stage.blocks {
			p := fmt.Sprintf("layer%d.%d.", s+1, b)
			conv(p+"conv1", stage.width, in, 1)
			bn(p+"bn1", stage.width)
			conv(p+"conv2", stage.width, stage.width, 3)
			bn(p+"bn2", stage.width)
			conv(p+"conv3", out, stage.width, 1)
			bn(p+"bn3", out)
			if b == 0 {
				conv(p+"downsample", out, in, 1)
				bn(p+"downsample.bn", out)
			}
			in = out
		}
	}
	add("fc.weight", 1000, 2048)
	add("fc.bias", 1000)
	return ts
}

// block is one parameter block: a tensor or a slice of one with its
// own key, as a worker pushes and pulls it (one key per request).
type block struct {
	Tensor int    `json:"t"` // tensor index (MXNet key, BytePS declared key)
	Part   int    `json:"p"` // slice of the tensor
	Key    uint64 `json:"k"` // key within the owner's range: ps key = ranges[Server].Begin + Key
	Elems  int    `json:"n"` // float32 elements, after scaling
	Server int    `json:"s"` // owning server's rank
}

// Bytes is the block's payload per push or pull.
func (b block) Bytes() int64 { return 4 * int64(b.Elems) }

// mxnetBigArrayBound is MXNET_KVSTORE_BIGARRAY_BOUND's default: tensors
// with at least this many elements are split over all servers.
const mxnetBigArrayBound = 1_000_000

// bytePSPartitionBytes is BYTEPS_PARTITION_BYTES's default (4096000, which
// is already a multiple of the 4 KiB page BytePS rounds it up to).
const bytePSPartitionBytes = 4_096_000

// scaleElems shrinks a size by the benchmark's scale factor, keeping at
// least one element.
func scaleElems(n int, scale float64) int {
	return max(1, int(math.Round(float64(n)/scale)))
}

// mxnetPlacement is MXNet's kvstore_dist rule for n servers. A tensor of
// fewer than MXNET_KVSTORE_BIGARRAY_BOUND elements (judged at its real
// size) goes whole to server (key*9973) % n with ps key ranges[s].Begin +
// key; a bigger one is split over all servers, part i on server i with ps
// key ranges[i].Begin + key and round(size/n*(i+1)) - round(size/n*i)
// elements (here of the scaled size).
func mxnetPlacement(ts []tensor, n int, scale float64) []block {
	var bs []block
	for key, t := range ts {
		size := scaleElems(t.Elems, scale)
		if t.Elems < mxnetBigArrayBound {
			bs = append(bs, block{Tensor: key, Key: uint64(key), Elems: size, Server: (key * 9973) % n})
			continue
		}
		for i := range n {
			part := int(math.Round(float64(size)/float64(n)*float64(i+1))) - int(math.Round(float64(size)/float64(n)*float64(i)))
			if part == 0 {
				continue
			}
			bs = append(bs, block{Tensor: key, Part: i, Key: uint64(key), Elems: part, Server: i})
		}
	}
	return bs
}

// djb2 is BytePS's default key hash (BYTEPS_KEY_HASH_FN=djb2):
// Bernstein's djb2 in its additive form, h = h*33 + c starting from
// h = 5381, over the ASCII decimal digits of the key (std::to_string), in
// uint64 arithmetic that wraps. For example key 0 ("0") hashes to
// 5381*33 + '0' = 177621.
func djb2(key uint64) uint64 {
	h := uint64(5381)
	for _, c := range []byte(strconv.FormatUint(key, 10)) {
		h = h*33 + uint64(c)
	}
	return h
}

// bytePSPlacement is BytePS's rule for n servers: each tensor
// (declared key d, in declaration order) is cut into partitions of
// BYTEPS_PARTITION_BYTES (judged at its real size), partition i getting key
// (d << 16) + i; a partition lives on server djb2(key) % n, with ps key
// ranges[s].Begin + key.
func bytePSPlacement(ts []tensor, n int, scale float64) []block {
	const bound = bytePSPartitionBytes / 4 // float32 elements
	var bs []block
	for d, t := range ts {
		for i, off := 0, 0; off < t.Elems; i++ {
			elems := min(bound, t.Elems-off)
			off += elems
			key := uint64(d)<<16 + uint64(i)
			bs = append(bs, block{Tensor: d, Part: i, Key: key, Elems: scaleElems(elems, scale), Server: int(djb2(key) % uint64(n))})
		}
	}
	return bs
}

// hashPlacement returns the named placement's blocks.
func hashPlacement(name string, n int, scale float64) ([]block, error) {
	ts := resNet50()
	switch name {
	case "mxnet":
		return mxnetPlacement(ts, n, scale), nil
	case "byteps":
		return bytePSPlacement(ts, n, scale), nil
	}
	return nil, fmt.Errorf("unknown placement %q: use mxnet or byteps", name)
}

// oraclePlacement reassigns blocks knowing each server's relative speed
// (capacity, any unit): longest processing time first on uniform machines —
// blocks by size, largest first, each to the server where it finishes
// earliest, (load+bytes)/capacity. Every block keeps its size but gets a
// fresh key (its index, so keys stay unique on every server). It is a
// static placement: computed once, before training.
func oraclePlacement(bs []block, capacity []float64) []block {
	order := make([]int, len(bs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(bs[b].Elems, bs[a].Elems) })
	load := make([]float64, len(capacity))
	out := slices.Clone(bs)
	for _, i := range order {
		best := -1
		var bt float64
		for s, c := range capacity {
			t := (load[s] + float64(bs[i].Bytes())) / c
			if best < 0 || t < bt-1e-12 {
				best, bt = s, t
			}
		}
		load[best] += float64(bs[i].Bytes())
		out[i].Server = best
		out[i].Key = uint64(i)
	}
	return out
}

// serverBytes sums the blocks' bytes per server.
func serverBytes(bs []block, n int) []int64 {
	out := make([]int64, n)
	for _, b := range bs {
		out[b.Server] += b.Bytes()
	}
	return out
}

// linkBound is the emulated model's iteration time of a placement:
// every worker pushes and pulls every block, each server's link carries
// 2*workers*bytes at its bandwidth, and the slowest link decides. It
// ignores CPU and per-message costs, so it bounds what a run can reach.
func linkBound(bs []block, workers int, bandwidth []float64) float64 {
	worst := 0.0
	for s, b := range serverBytes(bs, len(bandwidth)) {
		worst = max(worst, 2*float64(workers)*float64(b)/bandwidth[s])
	}
	return worst
}
