package inputs

// fleetCLI is the fleet's commands (cmd/ferry/fleet.go, fleet_member.go):
// the centre's act on the management cluster, a member's on its own.
func fleetCLI() []Entry {
	const (
		serve    = "ferry fleet serve"
		token    = "ferry fleet token create"
		members  = "ferry fleet members"
		revoke   = "ferry fleet revoke"
		group    = "ferry fleet group"
		promote  = "ferry fleet promote"
		place    = "ferry fleet place"
		rollouts = "ferry fleet rollouts"
		rollback = "ferry fleet rollback"
		imp      = "ferry fleet import"
		bundle   = "ferry fleet bundle"
		join     = "ferry fleet join"
		status   = "ferry fleet status"
		report   = "ferry fleet report"
		deadKube = " --kubeconfig {kube}"
		reportB  = "a signed report: a regular file of at most 96 MiB (wire.MaxReportFile), opened without blocking; its JSON decoded strictly, its receipts as `registry have`'s, at most 256 packages, 256 receipts of repositories and 64 labels, counted before any is decoded (wire.Report.UnmarshalJSON); its signature (a first report's: and its token) checked before its receipts are parsed and anything is written"
	)
	// centre is the flags of a centre command; try runs it against the
	// management cluster (kube adds --kubeconfig).
	centre := func(cmd, try string, flags ...string) []Entry {
		return append(none(cmd, append([]string{"--namespace"}, flags...)...), kube(cmd, try)...)
	}
	return concat(
		[]Entry{
			{Where: imp + " ARGS", Kind: File, Bound: reportB, Try: "fleet import {} --registry {reg}" + deadKube},
			{Where: bundle + " --file", Kind: Output, Bound: boundOutput + "; the bundle and its values (FILE.values.json) written both or neither (the bundle made in a temporary folder beside it, moved once its values are written); never the spooled package it is made from", Try: "fleet bundle m -f {} --registry {reg}" + deadKube},
			{Where: bundle + " --spool", Kind: Folder, Bound: "a folder the package is pulled into (by digest, verified as read) and removed from"},
			{Where: report + " --file", Kind: Output, Bound: boundOutput, Try: "fleet report -f {}" + deadKube},
			{Where: serve + " --spool", Kind: Folder, Bound: "a folder of packages pulled by digest (each verified as read) and bundles being written"},
			{Where: join + " ARGS", Kind: URL, Bound: "https://host[:port] and nothing else; kept in the member's Secret, dialled only by its agent with the token's CA pinned"},
			{Where: join + " --token", Kind: None, Bound: "ff1.<id>.<64 hex>.<64 hex>, checked for its shape; never printed"},
			{Where: report + " --token", Kind: None, Bound: "ff1.<id>.<64 hex>.<64 hex>, checked for its shape"},
			{Where: revoke + " ARGS", Kind: None, Bound: "a member's name"},
			{Where: group + " ARGS", Kind: None, Bound: "a group's name"},
			{Where: place + " ARGS", Kind: None, Bound: "a placement's name"},
			{Where: rollouts + " ARGS", Kind: None, Bound: "a placement's name"},
			{Where: rollback + " ARGS", Kind: None, Bound: "a placement's name"},
			{Where: bundle + " ARGS", Kind: None, Bound: "a member's name"},
		},
		centre(serve, "fleet serve --registry {reg} --addr 127.0.0.1:0", "--addr", "--host", "--interval", "--no-crds", "--registry"),
		remote(serve, "fleet serve --registry {reg}"+deadKube),
		centre(token, "fleet token create", "--ttl", "--uses", "--label", "--description"), output(token),
		centre(members, "fleet members"), output(members),
		centre(revoke, "fleet revoke m"), output(revoke),
		centre(group, "fleet group g --selector a=b", "--selector"), output(group),
		centre(promote, "fleet promote t c sha256:"+hex64, "--repository", "--package", "--registry"), output(promote),
		remote(promote, "fleet promote t c 1.0.0 --registry {reg}"+deadKube),
		centre(place, "fleet place p --track t --channel c --group g", "--track", "--channel", "--digest", "--group", "--set", "--components", "--timeout", "--canaries", "--wave-fraction", "--ready-timeout"), output(place),
		centre(rollouts, "fleet rollouts"), output(rollouts),
		centre(rollback, "fleet rollback p"), output(rollback),
		centre(imp, "fleet import {pkg} --registry {reg}", "--registry"), output(imp), remote(imp, "fleet import {pkg} --registry {reg}"+deadKube),
		centre(bundle, "fleet bundle m -f {out} --registry {reg}", "--package", "--registry"), output(bundle), remote(bundle, "fleet bundle m -f {out} --registry {reg}"+deadKube),
		none(join, "--name", "--label", "--namespace", "--force", "--timeout"), kube(join, "fleet join https://127.0.0.1:1 --token ff1.abcdef."+hex64+"."+hex64), output(join),
		none(status, "--namespace"), kube(status, "fleet status"), output(status),
		none(report, "--name", "--label", "--namespace", "--registry-via"), kube(report, "fleet report -f {out}"), output(report),
	)
}

const hex64 = "0000000000000000000000000000000000000000000000000000000000000000"
