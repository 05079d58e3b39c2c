package dashboard

import (
	"context"
	"testing"
)

// TestSBOMAuditSharedDB: two users who both find the same database
// deployed share one copy of it in memory, not one each (a database of
// 1,000,000 records takes 34 s and 1 GiB to load).
func TestSBOMAuditSharedDB(t *testing.T) {
	e := startCluster(t, true, Options{})
	ctx := context.Background()
	first := e.srv.actors["lab\x00"]
	other := &actor{cluster: first.cluster, cs: first.cs, pc: first.pc, reg: first.reg, ep: first.ep}
	var dbs []any
	for _, a := range []*actor{first, other} {
		reg, _, err := a.registry(ctx, e.srv.opts.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		db, _, err := e.srv.clusterDB(ctx, a, reg)
		if err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	if dbs[0] != dbs[1] {
		t.Error("each user's session loaded its own copy of the same database")
	}
}
