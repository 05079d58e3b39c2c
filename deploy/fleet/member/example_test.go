package member_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// What `ferry fleet join` does: the join written for the agent, which
// trades the token on its next round (member.WaitJoined waits for it).
func ExampleWriteJoin() {
	ctx := context.Background()
	cs := fake.NewClientset()
	token, _ := wire.NewToken(strings.Repeat("0", 64)) // the centre's CA's pin
	err := member.WriteJoin(ctx, cs, "ferry", member.Config{
		URL: "https://fleet.example.com:8443", Token: token.String(), Name: "ship-7",
		Labels: map[string]string{"region": "north"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := member.ReadStatus(ctx, cs, "ferry")
	fmt.Println(st.Member, st.Mode, "pending:", st.Pending, "joined:", st.Joined)
	// Output: ship-7 Connected pending: true joined: false
}

// What `ferry fleet report -f` does at a carried site: the report signed
// with the site key, made on the first report.
func ExampleWriteReport() {
	ctx := context.Background()
	cs := fake.NewClientset()
	scheme := runtime.NewScheme()
	_ = pkgapi.AddToScheme(scheme)
	pc := crfake.NewClientBuilder().WithScheme(scheme).Build()
	dir, _ := os.MkdirTemp("", "report")
	defer os.RemoveAll(dir)
	token, _ := wire.NewToken(strings.Repeat("0", 64))
	// No registry given: the report carries no receipt.
	rep, err := member.WriteReport(ctx, cs, pc, "ferry", nil, filepath.Join(dir, "site.json"),
		member.ReportFileOptions{Name: "ship-7", Token: token.String()})
	if err != nil {
		fmt.Println(err)
		return
	}
	data, _ := os.ReadFile(filepath.Join(dir, "site.json"))
	signed, _, _ := wire.OpenReport(data)
	fmt.Println(rep.Member, "first report:", rep.Token != "" && rep.PublicKey != "")
	fmt.Println("verifies:", wire.VerifyReport(signed, rep.PublicKey) == nil)
	// Output:
	// ship-7 first report: true
	// verifies: true
}
