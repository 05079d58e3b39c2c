package main

import (
	"errors"
	"fmt"

	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/upload"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// advice is what to type about the errors of the libraries only the full
// binary links (the front's are cli's own).
var advice = []cli.Advice{
	cli.AdviseIs(deploy.ErrUnsigned, "pass --key, or --insecure-skip-signature-verification"),
	cli.AdviseIs(deploy.ErrNoPackageAPI, "run `ferry init` of this version"),
	cli.AdviseIs(deploy.ErrNoTrustedKey, "`ferry init --key cosign.pub` adds one"),
	cli.AdviseIs(deploy.ErrBeingDeleted, "wait for `ferry remove` to finish"),
	cli.AdviseIs(deploy.ErrNoKeyToMigrate, "pass --key, the public keys it is signed with"),
	cli.AdviseIs(cluster.ErrNotSetUp, "run `ferry init` of this version"),
	cli.AdviseIs(reach.ErrNoRegistry, "run `ferry init`"),
	cli.AdviseIs(cluster.ErrUnreadableRecord, "mend the ConfigMap ferry-version in ferry's namespace, or pass --allow-downgrade to run over it"),
	{Is: func(err error) bool {
		var de *cluster.DowngradeError
		return errors.As(err, &de)
	}, For: func(err error) string {
		var de *cluster.DowngradeError
		errors.As(err, &de)
		want := "ferry " + de.Recorded.Version
		if de.Recorded.Version == "" {
			want = fmt.Sprintf("a ferry of formats generation %d", de.Recorded.Generation)
		}
		return "use " + want + " or newer, or pass --allow-downgrade to run this one anyway"
	}},
	cli.AdviseIs(reach.ErrForbidden, "grant this kubeconfig's user `create` on pods/portforward and `list` on pods in ferry's namespace (a Role and RoleBinding; `get`, `create`, `update`, `patch` and `delete` on pods/proxy make pushes ~1.5× faster), or run ferry on a node with --registry-via nodeport"),
	cli.AdviseIs(reach.ErrNoReadyPod, "run `ferry init` to repair it: it moves ferry's Pods off a node that is down"),
	cli.AdviseIs(upload.ErrNoToken, "use a kubeconfig with a token (OIDC, or `kubectl create token`), or deploy without --via-agent"),
	cli.AdviseIs(inject.ErrStrands, "pass --migrate to copy every repository first"),
	cli.AdviseIs(zarf.ErrNoTemplateValue, "give each with --set KEY=VALUE, or under [package.create.set] in a zarf-config.toml beside the zarf.yaml, as zarf package create takes them"),
	{Is: func(err error) bool {
		var be *install.BinaryError
		return errors.As(err, &be)
	}, For: func(err error) string {
		var be *install.BinaryError
		errors.As(err, &be)
		return fmt.Sprintf("build it with `CGO_ENABLED=0 GOOS=linux GOARCH=%s go build -trimpath -ldflags='-s -w' -o %s ./cmd/ferry`", be.Arch, be.Path)
	}},
}
