package replica

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/routing"
)

func backups(r *routing.Routes) [][]int32 {
	var out [][]int32
	for _, iv := range r.Intervals {
		out = append(out, iv.Backups)
	}
	return out
}

func TestPlaceGoesRoundTheRing(t *testing.T) {
	r := routing.IdentityRoutes(routing.KeyRanges(3))
	out, changed := Place(r, []int32{8, 10, 12}, 1)
	require.True(t, changed)
	assert.Equal(t, [][]int32{{10}, {12}, {8}}, backups(out))
	require.NoError(t, out.Validate())
	assert.Nil(t, r.Intervals[0].Backups, "r itself is not changed")
	out2, _ := Place(r, []int32{8, 10, 12}, 2)
	assert.Equal(t, [][]int32{{10, 12}, {8, 12}, {8, 10}}, backups(out2), "each server holds three copies")
	again, changed := Place(out, []int32{8, 10, 12}, 1)
	assert.False(t, changed, "a placed table stays as it is")
	assert.Equal(t, backups(out), backups(again))
}

func TestPlaceWithTooFewServersGivesWhatThereIs(t *testing.T) {
	r := routing.IdentityRoutes(routing.KeyRanges(2))
	out, _ := Place(r, []int32{8, 10}, 2)
	assert.Equal(t, [][]int32{{10}, {8}}, backups(out))
}

func TestFailoverPromotesTheFirstLiveBackupAndPlaceTopsUp(t *testing.T) {
	r := routing.IdentityRoutes(routing.KeyRanges(3))
	r, _ = Place(r, []int32{8, 10, 12}, 1) // 8:{10} 10:{12} 12:{8}
	out, promoted, lost := Failover(r, 10, []int32{8, 12})
	assert.Empty(t, lost)
	require.Len(t, promoted, 1)
	assert.Equal(t, int32(12), promoted[0].Node)
	assert.Equal(t, []int32{8, 12, 12}, []int32{out.Intervals[0].Node, out.Intervals[1].Node, out.Intervals[2].Node})
	assert.Equal(t, [][]int32{nil, nil, {8}}, backups(out), "10 left every list; its interval's backup was promoted")

	// A standby (14) joined: it holds nothing, so it takes the copies.
	topped, changed := Place(out, []int32{8, 12, 14}, 1)
	require.True(t, changed)
	assert.Equal(t, [][]int32{{14}, {14}, {8}}, backups(topped))
	require.NoError(t, topped.Validate())
	// Without it, the remaining servers do.
	topped, _ = Place(out, []int32{8, 12}, 1)
	assert.Equal(t, [][]int32{{12}, {8}, {8}}, backups(topped))
}

func TestFailoverWithoutALiveBackupLosesTheInterval(t *testing.T) {
	r := routing.IdentityRoutes(routing.KeyRanges(2))
	r, _ = Place(r, []int32{8, 10}, 1)
	out, _, _ := Failover(r, 10, []int32{8})
	out, promoted, lost := Failover(out, 8, nil)
	assert.Empty(t, promoted)
	require.Len(t, lost, 1, "both intervals were on 8, coalesced into one")
	assert.Equal(t, int32(8), lost[0].Node)
	assert.Equal(t, []int32{8}, Names(out))
}

func TestSeenTellsEarlierPushesFromLaterOnes(t *testing.T) {
	s := NewSeen()
	w := int32(9 << 8) // worker node 9, customer 0
	assert.False(t, s.Applied(w, 5, 1))
	s.Note(w, 5, 3)
	assert.True(t, s.Applied(w, 5, 3))
	assert.False(t, s.Applied(w, 5, 2), "an earlier push not applied yet (a re-send overtaken by a later push)")
	assert.False(t, s.Applied(w, 5, 4))
	s.Note(w, 5, 2)
	assert.True(t, s.Applied(w, 5, 2))
	assert.False(t, s.Applied(w, 6, 1), "another first key")
	assert.False(t, s.Applied(11<<8, 5, 1), "another worker")
	s.Note(w, 5, 1)
	assert.True(t, s.Applied(w, 5, 3), "an older note does not lower the mark")
	assert.True(t, s.Applied(w, 5, 1))
	s.Note(w, 5, 3+Window)
	assert.True(t, s.Applied(w, 5, 3), "still known after a shift")
	assert.False(t, s.Applied(w, 5, 4))
	assert.True(t, s.Applied(w, 5, 2), "further than Window below the top: counted applied")
	s.Note(w, 5, 3+Window+70)
	assert.False(t, s.Applied(w, 5, 3+Window+1), "across a word boundary")
	assert.True(t, s.Applied(w, 5, 3+Window))

	s.Note(11<<8, 100, 7)
	got := NewSeen()
	require.NoError(t, got.Import(s.Export(0, 50)))
	assert.True(t, got.Applied(w, 5, 3+Window))
	assert.False(t, got.Applied(w, 5, 3+Window+1))
	assert.False(t, got.Applied(11<<8, 100, 7), "outside the exported interval")
	assert.Error(t, got.Import([]byte{1, 2, 3}))

	s.Forget(9)
	assert.False(t, s.Applied(w, 5, 3))
	assert.True(t, s.Applied(11<<8, 100, 7))
}
