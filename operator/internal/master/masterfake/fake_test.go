package masterfake

import (
	"context"
	"testing"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestFakeDrainAndBalance(t *testing.T) {
	r := NewRegistry()
	c := &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	var mc master.Client
	mc, err := r.Factory(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f := r.For(types.NamespacedName{Namespace: "ns", Name: "c"})
	for _, s := range []string{"a", "b", "c"} {
		f.RegisterServer(s)
		f.SetRegions(s, 3)
	}
	f.SetManualDrain(true)
	if err := mc.Drain(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if f.Regions("a") != 3 || !f.Draining("a") {
		t.Fatalf("manual drain: regions %d, draining %v", f.Regions("a"), f.Draining("a"))
	}
	f.MoveRegionsAway("a")
	st, _ := mc.ClusterStatus(ctx)
	if st.RegionsTotal != 9 || f.Regions("a") != 0 {
		t.Fatalf("after the drain: total %d, a holds %d", st.RegionsTotal, f.Regions("a"))
	}
	_ = mc.Undrain(ctx, "a")
	_ = mc.Balance(ctx)
	for _, s := range []string{"a", "b", "c"} {
		if f.Regions(s) != 3 {
			t.Errorf("after balance %s holds %d", s, f.Regions(s))
		}
	}
	want := []string{"Drain a", "Undrain a", "Balance"}
	if got := f.Journal(); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("journal %q", got)
	}
}
