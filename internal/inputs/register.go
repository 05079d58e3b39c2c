package inputs

// Bounds said once and used by many entries.
const (
	boundKeyFile   = "a regular file of at most 64 KiB, opened without blocking (internal/confine.ReadPath)"
	boundCAFile    = "a regular file of at most 4 MiB holding PEM certificates, opened without blocking"
	boundPackage   = "read as docs/limits.md's package limits say: every blob against its digest, head files ≤ 4 MiB, blobs ≤ what ferry.json records, zstd window ≤ 8 MiB, expansion ≤ 100×, nothing after the archive's end; a registry's answers as `answer` says"
	boundRegistry  = "its answers bounded as the `answer` entries say"
	boundOutput    = "a folder there is refused; written to a temporary file beside it (its folder made if missing), renamed when whole (internal/atomicfile); never a file the command reads"
	boundStdin     = "at most 64 KiB, one line"
	boundKubconfig = "each file a regular file of at most 1 MiB, and so is every certificate, key and token file it names, checked before client-go reads them; an exec credential plugin it names runs as kubectl runs it (the user's own command)"
	boundStorage   = "a folder, or s3://bucket[/prefix]?… (a URL, printed redacted)"
	boundDefFile   = "a regular file inside the definition's folder (links, FIFOs, devices refused without blocking), at most the size its kind allows"
)

// Register is every input ferry reads. Entries whose Kind is None are
// declared so that the hostile test knows they were looked at.
var Register = concat(
	cli(),
	fleetCLI(),
	sbomCLI(),
	definition(),
	zarf(),
	environment(),
	answers(),
	requests(),
	fleetMember(),
)

func concat(parts ...[]Entry) []Entry {
	var all []Entry
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// none declares flags of cmd that read nothing from outside.
func none(cmd string, flags ...string) []Entry {
	var es []Entry
	for _, f := range flags {
		es = append(es, Entry{Where: cmd + " " + f, Kind: None})
	}
	return es
}

// remote is the registry flags (cli.RemoteFlags) of cmd; try reaches a
// registry with them.
func remote(cmd, try string) []Entry {
	return append([]Entry{
		{Where: cmd + " --ca-file", Kind: File, Bound: boundCAFile, Try: try + " --ca-file {}"},
		{Where: cmd + " --password-stdin", Kind: Stdin, Bound: boundStdin, Try: try + " -u user --password-stdin <{}"},
	}, none(cmd, "--username", "--plain-http", "--insecure")...)
}

// tlsOnly is the registry flags of a command that reads from registries
// with the docker config file's credentials only.
func tlsOnly(cmd, try string) []Entry {
	return append([]Entry{
		{Where: cmd + " --ca-file", Kind: File, Bound: boundCAFile, Try: try + " --ca-file {}"},
	}, none(cmd, "--plain-http", "--insecure")...)
}

// kube is the cluster flags of cmd; try reaches the cluster with them.
func kube(cmd, try string, flags ...string) []Entry {
	es := []Entry{{Where: cmd + " --kubeconfig", Kind: YAML, Bound: boundKubconfig, Try: try + " --kubeconfig {}"}}
	return append(es, none(cmd, append([]string{"--context"}, flags...)...)...)
}

// output is cmd's -o (text or json).
func output(cmd string) []Entry { return none(cmd, "--output") }

func cli() []Entry {
	const (
		create   = "ferry package create"
		find     = "ferry package find-images"
		convert  = "ferry package convert"
		imp      = "ferry package import"
		inspect  = "ferry package inspect"
		verify   = "ferry package verify"
		sign     = "ferry package sign"
		push     = "ferry package push"
		pull     = "ferry package pull"
		mirror   = "ferry package mirror"
		sbom     = "ferry package sbom"
		split    = "ferry package split"
		delta    = "ferry package delta"
		deploy   = "ferry deploy"
		initCmd  = "ferry init"
		list     = "ferry list"
		remove   = "ferry remove"
		dash     = "ferry dashboard"
		agent    = "ferry agent"
		probe    = "ferry agent-probe"
		ctrl     = "ferry controller"
		git      = "ferry git-server"
		keygen   = "ferry key generate"
		serve    = "ferry registry serve"
		load     = "ferry registry load"
		gc       = "ferry registry gc"
		migrate  = "ferry registry migrate"
		check    = "ferry registry check"
		connect  = "ferry registry connect"
		have     = "ferry registry have"
		bkp      = "ferry registry backup"
		restore  = "ferry registry restore"
		login    = "ferry registry login"
		logout   = "ferry registry logout"
		version  = "ferry version"
		regPkg   = "{reg}/test/pkg:0.1.0"
		noSBOM   = " --sbom=false"
		deadKube = " --kubeconfig {kube}"
	)
	return concat(
		// package create
		[]Entry{
			{Where: create + " ARGS", Kind: YAML, Bound: "a folder holding ferry.yaml, or the file: at most 4 MiB (definition.MaxSize), a regular file; every field as the ferry.yaml entries say", Try: "package create {} -f {out}" + noSBOM},
			{Where: create + " --file", Kind: Output, Bound: boundOutput, Try: "package create {def} -f {}" + noSBOM},
			{Where: create + " --sign-key", Kind: File, Bound: boundKeyFile, Try: "package create {def} -f {out} --sign-key {}" + noSBOM},
		},
		[]Entry{{Where: create + " --dry-run", Kind: YAML, Bound: "the definition as ARGS says, read past its mistakes (at most 100 kept, definition.MaxProblems); its files, charts and layouts read as create reads them, charts in the bounded child; nothing fetched, nothing written", Try: "package create {} --dry-run", Lines: 101}},
		none(create, "--format", "--part-size", "--sbom", "--sbom-format", "--render-memory", "--render-timeout"),
		tlsOnly(create, "package create {def} -f {out}"+noSBOM),
		output(create),
		// package find-images
		[]Entry{
			{Where: find + " ARGS", Kind: YAML, Bound: "as package create's", Try: "package find-images {}"},
		},
		none(find, "--check", "--write", "--write-maybe", "--set", "--kube-version", "--render-memory", "--render-timeout"),
		tlsOnly(find, "package find-images {def}"),
		output(find),
		// package convert
		[]Entry{
			{Where: convert + " ARGS", Kind: YAML, Bound: "zarf.yaml files, or folders holding one or, below them, several (at most 100,000 entries looked through, 1,000 zarf.yaml found, links not followed): at most 4 MiB each, node and component counts bounded; every field as the zarf.yaml entries say; the Zarf config file beside each (or in the current folder) as env ZARF_CONFIG's", Try: "package convert {}"},
			{Where: convert + " --file", Kind: Output, Bound: boundOutput, Try: "package convert {zarfdef} -f {}"},
		},
		none(convert, "--architecture", "--flavor", "--force", "--set", "--strict"),
		output(convert),
		// package import
		[]Entry{
			{Where: imp + " ARGS", Kind: Package, Bound: "a Zarf package archive or its first part: read once, in order, every entry checked against checksums.txt; parts regular files of the sizes the first part records, its Sha256Sum checked", Try: "package import {} -f {out}"},
			{Where: imp + " --key", Kind: File, Bound: boundKeyFile, Try: "package import {zarfpkg} -f {out} --key {}"},
			{Where: imp + " --sign-key", Kind: File, Bound: boundKeyFile, Try: "package import {zarfpkg} -f {out} --sign-key {}"},
			{Where: imp + " --file", Kind: Output, Bound: boundOutput, Try: "package import {zarfpkg} -f {}"},
		},
		none(imp, "--sbom", "--strict"),
		output(imp),
		// reading packages
		[]Entry{
			{Where: inspect + " ARGS", Kind: Package, Bound: boundPackage, Try: "package inspect {}"},
			{Where: inspect + " --key", Kind: File, Bound: boundKeyFile, Try: "package inspect {pkg} --key {}"},
			{Where: verify + " ARGS", Kind: Package, Bound: boundPackage, Try: "package verify {} --key {pub}"},
			{Where: verify + " --key", Kind: File, Bound: boundKeyFile, Try: "package verify {pkg} --key {}"},
			{Where: sign + " ARGS", Kind: Package, Bound: boundPackage, Try: "package sign {} --key {key}"},
			{Where: sign + " --key", Kind: File, Bound: boundKeyFile, Try: "package sign {pkg} --key {}"},
			{Where: push + " ARGS", Kind: Package, Bound: boundPackage + "; the destination's answers as `answer` says", Try: "package push {} {reg}/hostile/pkg:1"},
			{Where: push + " --mount-from", Kind: None, Bound: "a repository name of the destination registry"},
			{Where: pull + " ARGS", Kind: Registry, Bound: boundRegistry, Try: "package pull {} -f {out}"},
			{Where: pull + " --file", Kind: Output, Bound: boundOutput, Try: "package pull " + regPkg + " -f {}"},
			{Where: pull + " --key", Kind: File, Bound: boundKeyFile, Try: "package pull " + regPkg + " -f {out} --key {}"},
			{Where: mirror + " ARGS", Kind: Package, Bound: boundPackage, Try: "package mirror {} {reg}/mirror"},
			{Where: mirror + " --key", Kind: File, Bound: boundKeyFile, Try: "package mirror {pkg} {reg}/mirror --key {}"},
			{Where: sbom + " ARGS", Kind: Package, Bound: boundPackage + "; with IMAGE --table, each SBOM document read within bom.DefaultLimits (64 MiB, 200,000 components, strings of 64 KiB, 256 licenses a component; an entry over 64 KiB walked element by element, so memory follows what is kept), versions over 128 bytes never parsed (bom.MaxVersionLen), and every cell, image, platform and format quoted when it holds a control character", Try: "package sbom {}"},
			{Where: sbom + " --key", Kind: File, Bound: boundKeyFile, Try: "package sbom {pkg} --key {}"},
			{Where: sbom + " --output-dir", Kind: Output, Bound: "an existing folder; each SBOM written whole", Try: "package sbom {pkg} --output-dir {}"},
			{Where: split + " ARGS", Kind: Package, Bound: boundPackage + "; a damaged source is refused before a part is written", Try: "package split {} --size 1MiB -f {out}"},
			{Where: split + " --file", Kind: Output, Bound: "the parts' base name: BASE.partNNN and BASE.parts.json, each written whole"},
			{Where: delta + " ARGS", Kind: Package, Bound: boundPackage, Try: "package delta {} --have {pkg} -f {out}"},
			{Where: delta + " --have", Kind: Package, Bound: "a receipt (a regular file of at most 64 MiB, its signature checked with --have-key), an older package (as ARGS) or a registry reference", Try: "package delta {pkg} --have {} -f {out}"},
			{Where: delta + " --have-key", Kind: File, Bound: boundKeyFile, Try: "package delta {pkg} --have {receipt} --have-key {} -f {out}"},
			{Where: delta + " --have-signature", Kind: File, Bound: "a regular file of at most 64 KiB", Try: "package delta {pkg} --have {receipt} --have-key {pub} --have-signature {} -f {out}"},
			{Where: delta + " --file", Kind: Output, Bound: boundOutput, Try: "package delta {pkg} --have {pkg} -f {}"},
		},
		none(verify, "--images"),
		none(sbom, "--platform", "--table"),
		none(split, "--size"),
		remote(inspect, "package inspect "+regPkg), output(inspect),
		remote(verify, "package verify "+regPkg+" --key {pub}"), output(verify),
		remote(sign, "package sign "+regPkg+" --key {key}"), output(sign),
		remote(push, "package push {pkg} {reg}/push/pkg:1"), output(push),
		remote(pull, "package pull "+regPkg+" -f {out}"), output(pull),
		remote(mirror, "package mirror {pkg} {reg}/mirror"), output(mirror),
		remote(sbom, "package sbom "+regPkg), output(sbom),
		remote(delta, "package delta {pkg} --have "+regPkg+" -f {out}"), output(delta),
		output(split),
		kube(mirror, "package mirror {pkg} --in-cluster", "--namespace", "--in-cluster", "--registry-via"),
		// the cluster
		[]Entry{
			{Where: deploy + " ARGS", Kind: Package, Bound: boundPackage + "; verified before the cluster is written to", Try: "deploy {} --key {pub}" + deadKube},
			{Where: deploy + " --key", Kind: File, Bound: boundKeyFile, Try: "deploy {pkg} --key {}" + deadKube},
			{Where: initCmd + " --key", Kind: File, Bound: boundKeyFile, Try: "init --key {}" + deadKube},
			{Where: initCmd + " --bin-dir", Kind: Folder, Bound: "a folder whose binaries are read as regular files, each at most 256 MiB", Try: "init --bin-dir {}" + deadKube},
			{Where: initCmd + " --storage-ca", Kind: File, Bound: boundCAFile, Try: "init --storage s3://b?endpoint=https://127.0.0.1:1 --storage-ca {}" + deadKube},
			{Where: initCmd + " --storage", Kind: URL, Bound: boundStorage},
			{Where: remove + " ARGS", Kind: None, Bound: "package names"},
		},
		none(deploy, "--components", "--insecure-skip-signature-verification", "--set", "--timeout", "--via-agent", "--wait", "--namespace", "--registry-via"),
		remote(deploy, "deploy "+regPkg+" --key {pub}"+deadKube), output(deploy),
		kube(deploy, "deploy {pkg} --key {pub}"),
		none(initCmd, "--allow-downgrade", "--cert-validity", "--cert-renew-before", "--migrate", "--node-port", "--replicas", "--require-known-images", "--storage-credentials", "--storage-dir", "--timeout", "--namespace", "--registry-via"),
		kube(initCmd, "init"), output(initCmd),
		kube(list, "list", "--namespace"), output(list),
		kube(remove, "remove pkg", "--namespace", "--registry-via", "--timeout"), output(remove),
		// servers
		[]Entry{
			{Where: dash + " --tls-cert", Kind: File, Bound: boundCAFile, Try: "dashboard --addr 127.0.0.1:0 --tls-cert {} --tls-key {tlskey}" + deadKube},
			{Where: dash + " --tls-key", Kind: File, Bound: boundKeyFile, Try: "dashboard --addr 127.0.0.1:0 --tls-cert {tlscert} --tls-key {}" + deadKube},
			{Where: agent + " --tls-cert", Kind: File, Bound: boundCAFile, Try: "agent --addr 127.0.0.1:0 --tls-cert {} --tls-key {tlskey}" + deadKube},
			{Where: agent + " --tls-key", Kind: File, Bound: boundKeyFile, Try: "agent --addr 127.0.0.1:0 --tls-cert {tlscert} --tls-key {}" + deadKube},
			{Where: agent + " --upload-dir", Kind: Folder, Bound: "a folder ferry's temporaries go in (internal/scratch)"},
			{Where: git + " --repos", Kind: YAML, Bound: "a JSON file of at most 4 MiB, a regular file", Try: "git-server --addr 127.0.0.1:0 --repos {} --registry {reg}"},
			{Where: git + " --htpasswd", Kind: File, Bound: "a regular file of at most 4 MiB", Try: "git-server --addr 127.0.0.1:0 --repos {repos} --registry {reg} --htpasswd {}"},
			{Where: git + " --cache-dir", Kind: Folder, Bound: "a folder ferry's temporaries go in (internal/scratch)"},
			{Where: serve + " --htpasswd", Kind: File, Bound: "a regular file of at most 4 MiB", Try: "registry serve --addr 127.0.0.1:0 --root {root} --htpasswd {}"},
			{Where: serve + " --tls-cert", Kind: File, Bound: boundCAFile, Try: "registry serve --addr 127.0.0.1:0 --root {root} --tls-cert {} --tls-key {tlskey}"},
			{Where: serve + " --tls-key", Kind: File, Bound: boundKeyFile, Try: "registry serve --addr 127.0.0.1:0 --root {root} --tls-cert {tlscert} --tls-key {}"},
			{Where: serve + " --load", Kind: Package, Bound: boundPackage, Try: "registry serve --addr 127.0.0.1:0 --root {root} --load {}"},
			{Where: serve + " --root", Kind: Folder, Bound: "distribution's filesystem driver's folder"},
			{Where: serve + " --storage", Kind: URL, Bound: boundStorage},
		},
		none(dash, "--addr", "--all-contexts", "--contexts", "--host", "--namespace", "--verbose", "--fleet", "--fleet-namespace", "--fleet-registry", "--advisory-max-age"),
		kube(dash, "dashboard --addr 127.0.0.1:0"),
		// The registry flags are read before --addr is checked: off
		// loopback without TLS, the dashboard then refuses to start.
		remote(dash, "dashboard --addr 0.0.0.0:0 --fleet --fleet-registry {reg}"),
		none(agent, "--tls-secret", "--addr", "--namespace", "--pull-secret", "--registry", "--require-known", "--upload-max-bytes", "--verbose"),
		kube(agent, "agent --addr 127.0.0.1:0 --tls-cert {tlscert} --tls-key {tlskey}"),
		none(probe, "--addr", "--wait"),
		none(ctrl, "--cert-validity", "--cert-renew-before", "--rotate-certificates", "--render-memory", "--render-timeout", "--drift-check", "--gc-quiet", "--health-addr", "--leader-elect", "--namespace", "--registry", "--resync", "--verbose"),
		kube(ctrl, "controller --health-addr 0"),
		none(git, "--addr", "--insecure-no-auth", "--namespace", "--registry", "--timeout", "--shutdown-timeout", "--verbose"),
		remote(git, "git-server --addr 127.0.0.1:0 --repos {repos} --registry {reg}"),
		kube(git, "git-server --addr 127.0.0.1:0 --namespace ferry"),
		none(serve, "--addr", "--insecure-no-auth", "--log-level", "--shutdown-timeout"),
		output(serve),
		// registry storage
		[]Entry{
			{Where: load + " ARGS", Kind: Package, Bound: boundPackage, Try: "registry load {} --root {root}"},
			{Where: load + " --root", Kind: Folder, Bound: "distribution's filesystem driver's folder"},
			{Where: load + " --storage", Kind: URL, Bound: boundStorage},
			{Where: gc + " --root", Kind: Folder, Bound: "distribution's filesystem driver's folder"},
			{Where: gc + " --storage", Kind: URL, Bound: boundStorage},
			{Where: migrate + " --from", Kind: URL, Bound: boundStorage},
			{Where: migrate + " --to", Kind: URL, Bound: boundStorage},
		},
		none(load, "--addr"), output(load),
		none(gc, "--dry-run", "--settle"), output(gc),
		none(migrate, "--settle"), output(migrate),
		// registries
		[]Entry{
			{Where: check + " ARGS", Kind: Registry, Bound: boundRegistry + "; every answer read to at most the large blob's size + 16 MiB", Try: "registry check {host}", Budget: &Budget{Seconds: 20, MiB: 512}},
			{Where: have + " ARGS", Kind: Registry, Bound: boundRegistry + "; a package as `package inspect ARGS`", Try: "registry have {host} -f {out}"},
			{Where: have + " --file", Kind: Output, Bound: boundOutput, Try: "registry have {pkg} -f {}"},
			{Where: have + " --key", Kind: File, Bound: boundKeyFile, Try: "registry have {pkg} -f {out} --key {}"},
			{Where: login + " ARGS", Kind: Registry, Bound: "only the status of its /v2/ answer is read"},
			{Where: logout + " ARGS", Kind: None, Bound: "a registry host"},
		},
		none(check, "--all", "--check", "--large-blob-size", "--workflow"),
		remote(check, "registry check {reg}"), output(check),
		none(have, "--cluster", "--prefix", "--namespace", "--registry-via"),
		remote(have, "registry have {reg} -f {out}"), output(have),
		kube(have, "registry have --cluster -f {out}"),
		// backup and restore
		[]Entry{
			{Where: bkp + " --file", Kind: Output, Bound: "a file whose folder exists (a folder or other non-regular file there is refused), written to FILE.partial and renamed when whole; or s3://BUCKET/KEY?… (a URL, credentials refused in it), one multipart upload completed at the end", Try: "registry backup --cluster -f {}" + deadKube},
			{Where: bkp + " --key", Kind: File, Bound: boundKeyFile, Try: "registry backup --cluster -f {out} --key {}" + deadKube},
			{Where: bkp + " --since", Kind: Package, Bound: "a regular file (or s3:// URL) read from its start up to its record only: at most 8 entries, each at most 4 MiB, the record at most 64 MiB (backup.MaxRecordSize); or a receipt of at most 64 MiB (artifact.MaxReceiptSize), refused by its size before it is read (750,000 entries, 61 MB: 2.0 s, 242 MiB allocated)", Try: "registry backup --cluster -f {out} --since {}" + deadKube},
			{Where: restore + " ARGS", Kind: Package, Bound: "1 to 1,000 regular files (or s3:// URLs, downloaded into a scratch folder held while ferry runs, removed after or by the next ferry if killed): the head and record read as --since reads them before the cluster is reached, then each read as `package verify` reads a package, every manifest read and checked (at most 4 MiB, its digest, its JSON) before any blob of that file is pushed, one held in memory at a time (100,000 in a chain ordered in 0.9 s), every other blob checked as it is pushed", Try: "registry restore --cluster {}" + deadKube},
			{Where: restore + " --key", Kind: File, Bound: boundKeyFile, Try: "registry restore --cluster {pkg} --key {}" + deadKube},
		},
		none(bkp, "--cluster", "--namespace", "--registry-via", "--package", "--repository"),
		kube(bkp, "registry backup --cluster -f {out}"), output(bkp),
		none(restore, "--cluster", "--namespace", "--registry-via", "--no-wait", "--timeout"),
		kube(restore, "registry restore --cluster {pkg}"), output(restore),
		remote(login, "registry login {reg}"),
		none(connect, "--addr", "--namespace", "--registry-via"),
		kube(connect, "registry connect"), output(connect),
		// keys and the rest
		[]Entry{
			{Where: keygen + " ARGS", Kind: Output, Bound: "an existing folder the key pair is written in, never over an existing key without --force"},
			{Where: keygen + " --prefix", Kind: None, Bound: "a file name, no separator"},
		},
		none(keygen, "--force"), output(keygen),
		output(version),
	)
}

func definition() []Entry {
	const (
		c     = "ferry.yaml components[]"
		chart = "- name: c\n  findImages: true\n  charts:\n  - path: {}\n"
	)
	file := func(where, bound, try string) Entry {
		return Entry{Where: "ferry.yaml " + where, Kind: File, Bound: bound, Try: try}
	}
	values := func(fields ...string) []Entry {
		var es []Entry
		for _, f := range fields {
			es = append(es, Entry{Where: "ferry.yaml " + f, Kind: None})
		}
		return es
	}
	return concat(
		values("apiVersion", "kind", "metadata", "metadata.name", "metadata.version", "metadata.description",
			"platforms", "sbom", "sbom.enabled", "sbom.format", "imagePolicies", "verify", "components",
			"imagePolicies[].name", "imagePolicies[].required", "imagePolicies[].authorities", "imagePolicies[].attestations",
			"imagePolicies[].authorities[].name", "imagePolicies[].authorities[].keyless",
			"imagePolicies[].authorities[].keyless.identities",
			"imagePolicies[].authorities[].keyless.identities[].issuer", "imagePolicies[].authorities[].keyless.identities[].subject",
			"imagePolicies[].authorities[].keyless.identities[].issuerRegExp", "imagePolicies[].authorities[].keyless.identities[].subjectRegExp",
			"imagePolicies[].attestations[].name", "imagePolicies[].attestations[].predicateType",
			"components[].name", "components[].description", "components[].required", "components[].findImages",
			"components[].verify", "components[].images", "components[].charts", "components[].manifests",
			"components[].files", "components[].repositories",
			"components[].images[].ref", "components[].images[].tag", "components[].images[].verify", "components[].images[].platform",
			"components[].charts[].version", "components[].charts[].namespace", "components[].charts[].releaseName",
			"components[].manifests[].name", "components[].manifests[].namespace",
			"components[].files[].target", "components[].files[].mode",
			"components[].repositories[].ref", "components[].repositories[].history",
			"components[].advisories",
		),
		[]Entry{
			file("imagePolicies[].authorities[].key", "a public key of at most 64 KiB, "+boundDefFile,
				"imagePolicies:\n- name: p\n  authorities:\n  - key: {}\ncomponents:\n- name: c\n  verify: p\n  findImages: true\n  manifests:\n  - name: m\n    files: [m.yaml]\n"),
			file("imagePolicies[].authorities[].keyless.trustedRoot", "a trusted_root.json of at most 1 MiB, "+boundDefFile,
				"imagePolicies:\n- name: p\n  authorities:\n  - keyless:\n      trustedRoot: {}\n      identities: [{issuer: i, subject: s}]\ncomponents:\n- name: c\n  verify: p\n  findImages: true\n  manifests:\n  - name: m\n    files: [m.yaml]\n"),
			{Where: c[:len("ferry.yaml ")] + "components[].images[].layout", Kind: Folder, Bound: "an OCI layout folder held to the archive's rules (regular files only, opened without following links), " + boundDefFile,
				Try: "components:\n- name: c\n  images:\n  - ref: example.com/a:1\n    layout: {}\n"},
			// The child's heap is capped at 7/8 of 512 MiB; its resident set
			// adds ferry's code pages (~100 MiB): 700 MiB for the largest.
			{Where: "ferry.yaml components[].charts[].path", Kind: Chart, Bound: "a chart folder or .tgz of at most 64 MiB, " + boundDefFile + "; rendered (findImages) in a child process of at most 512 MiB and 30 s",
				Try: "components:\n" + chart, Budget: &Budget{Seconds: 40, MiB: 700}},
			{Where: "ferry.yaml components[].charts[].url", Kind: URL, Bound: "oci://host/path/chart, printed redacted; the chart fetched as a registry answer"},
			{Where: "ferry.yaml components[].manifests[].files", Kind: YAML, Bound: "YAML files or folders of at most 64 MiB together (artifact.MaxManifestBundleSize), every document a Kubernetes object, " + boundDefFile,
				Try: "components:\n- name: c\n  manifests:\n  - name: m\n    files: [{}]\n"},
			file("components[].files[].source", "a file of any size, streamed (hashed as read), "+boundDefFile,
				"components:\n- name: c\n  files:\n  - source: {}\n    target: /x\n"),
			{Where: "ferry.yaml components[].repositories[].path", Kind: Folder, Bound: "a git repository inside the definition's folder: gitdir, commondir and alternates confined; the tree's limits in docs/limits.md",
				Try: "components:\n- name: c\n  repositories:\n  - url: https://example.com/r.git\n    path: {}\n"},
			{Where: "ferry.yaml components[].advisories[].source", Kind: File, Bound: "a zip of OSV records or a folder of *.json records, " + boundDefFile + "; at most 1,000,000 records of 4 MiB, 2 GiB together, a zip's entry count and sizes read from its directory before any entry and expanding at most 100x; per record 10,000 affected entries and range events, 100,000 versions, 16 KiB strings (advisory.DefaultLimits); each event's version parsed once at load, one over 128 bytes (bom.MaxVersionLen) or not starting with a digit left out, so a match costs compares, never parses; a refusal names the record",
				Try: "components:\n- name: c\n  advisories:\n  - source: {}\n"},
			{Where: "ferry.yaml components[].repositories[].url", Kind: URL, Bound: "https, http, ssh or scp-like; a password, query, fragment or control character refused; printed redacted; over HTTP(S) the server's list of refs at most 32 MiB (artifact.MaxGitRefList), a server answering nothing or sending slower than 16 KiB/s for a minute given up"},
		},
	)
}

func zarf() []Entry {
	// Zarf fields that name a file or a folder convert reads; every other
	// field of Zarf v0.60.0's schema is a value (artifact/zarf's knownFields).
	file := func(where, try string) Entry {
		return Entry{Where: "zarf.yaml " + where, Kind: File, Bound: boundDefFile + "; hashed (shasum) or scanned for template tokens at most to its size bound", Try: try}
	}
	return []Entry{
		file("ZarfFile.source", "components:\n- name: c\n  files:\n  - source: {}\n    target: /x\n    shasum: 0000000000000000000000000000000000000000000000000000000000000000\n"),
		file("ZarfManifest.files", "components:\n- name: c\n  manifests:\n  - name: m\n    files: [{}]\n"),
		file("ZarfChart.valuesFiles", "components:\n- name: c\n  charts:\n  - name: x\n    version: 1.0.0\n    localPath: chart\n    namespace: x\n    valuesFiles: [{}]\n"),
		{Where: "zarf.yaml ZarfChart.localPath", Kind: Folder, Bound: boundDefFile, Try: "components:\n- name: c\n  charts:\n  - name: x\n    version: 1.0.0\n    localPath: {}\n    namespace: x\n"},
		{Where: "zarf.yaml ZarfManifest.kustomizations", Kind: File, Bound: boundDefFile + "; every kustomization it reaches read first (200,000 YAML nodes each) and one naming a URL, a git repository or a Helm repository refused before kustomize runs, nothing fetched; kustomize reads and renders at most 64 MiB", Try: "components:\n- name: c\n  manifests:\n  - name: m\n    kustomizations: [{}]\n"},
		{Where: "zarf.yaml ZarfDataInjection.source", Kind: None, Bound: "reported as a gap, never read"},
		{Where: "zarf.yaml ZarfComponentImport.path", Kind: None, Bound: "reported as a gap (flatten first), never read"},
		{Where: "zarf.yaml ZarfComponent.cosignKeyPath", Kind: File, Bound: boundDefFile + " (reported as a gap, never read)"},
		{Where: "zarf.yaml ZarfChart.url", Kind: URL, Bound: "printed redacted"},
		{Where: "zarf.yaml ZarfComponentImport.url", Kind: URL, Bound: "printed redacted"},
		{Where: "zarf.yaml ZarfMetadata.url", Kind: URL, Bound: "printed redacted"},
		{Where: "zarf.yaml ZarfMetadata.source", Kind: None, Bound: "a URL kept as text"},
		{Where: "zarf.yaml ZarfChart.gitPath", Kind: None, Bound: "a path inside the chart's git repository, which is fetched as a URL"},
		{Where: "zarf.yaml ZarfChartVariable.path", Kind: None, Bound: "a path into the chart's values"},
		{Where: "zarf.yaml ZarfComponent.files", Kind: None, Bound: "the list; each entry as ZarfFile's fields"},
		{Where: "zarf.yaml ZarfFile.extractPath", Kind: None, Bound: "a path inside the archive source names"},
	}
}

func environment() []Entry {
	return []Entry{
		{Where: "env KUBECONFIG", Kind: YAML, Bound: boundKubconfig, Try: "KUBECONFIG={} list"},
		{Where: "env DOCKER_CONFIG", Kind: File, Bound: "its config.json a regular file of at most 4 MiB (artifact.MaxDockerConfigSize), checked before it is read; a credential helper it names runs as docker runs it (the user's own command)", Try: "DOCKER_CONFIG={dockerdir} package inspect {reg}/test/pkg:0.1.0", Accepts: []string{"missing"}},
		{Where: "env ZARF_CONFIG", Kind: YAML, Bound: "the Zarf config file convert reads (else zarf-config.{json,toml,yaml,yml} beside the zarf.yaml or in the current folder): a regular file of at most 256 KiB opened without blocking; TOML with at most 256 '{', 4,096 '[' and 256 '.' a line before it is parsed, YAML held to 200,000 nodes with aliases expanded; only package.create.set and package.deploy.set read, their values scalars; a value filling a package template holds no control character, and the zarf.yaml it fills stays within 4 MiB", Try: "ZARF_CONFIG={} package convert {zarfdef} -f {outdir}/ferry.yaml"},
		{Where: "env NETRC", Kind: File, Bound: "a regular file of at most 1 MiB (internal/gitcred)"},
		{Where: "env FERRY_REGISTRY_PASSWORD", Kind: None, Bound: "a password: never printed"},
		{Where: "env COSIGN_PASSWORD", Kind: None, Bound: "a key's password: never printed"},
		{Where: "env SOURCE_DATE_EPOCH", Kind: None, Bound: "an integer"},
		{Where: "env XDG_DATA_HOME", Kind: Folder, Bound: "where the registry's default root is"},
		{Where: "env FERRY_CACHE_DIR", Kind: Folder, Bound: "init's cache of built layers: entries checked against their digests"},
		{Where: "env " + "FERRY_FRONT_BUILD", Kind: None, Bound: "the front binary's build identity, compared"},
		{Where: "env FERRY_REGISTRY_STORAGE", Kind: URL, Bound: boundStorage},
		{Where: "env FERRY_REGISTRY_HTTP_SECRET", Kind: None, Bound: "the in-cluster registry's upload state secret"},
	}
}

func answers() []Entry {
	const test = "cmd/ferry TestHostileInputs (its hostile registry), artifact's hostile tests"
	return []Entry{
		{Where: "answer manifest", Kind: Registry, Bound: "at most 4 MiB (artifact.MaxManifestSize), read no further, checked against its digest", Test: test},
		{Where: "answer blob", Kind: Registry, Bound: "at most its descriptor's size, checked against its digest; a registry sending slower than 16 KiB/s over a minute given up", Test: test},
		{Where: "answer pages", Kind: Registry, Bound: "tags, catalog and referrers lists: page and entry counts bounded (artifact's listing limits)", Test: test},
		{Where: "answer error", Kind: Registry, Bound: "an error body read to at most 8 KiB, one line", Test: test},
		{Where: "answer sbom index", Kind: Registry, Bound: "the SBOM index a cluster or a fleet's centre keeps (repository ferry/sbom-index or ferry-fleet/sbom-index): only the manifest the ConfigMap ferry-sbom-index pins is read, by digest, never the tag, so an index pushed by whoever may push but not write the namespace is not read; at most 1 GiB (bomscan.MaxIndexSize), checked against its digest as read and under bom's index limits; one that is not an index, or is gone, is made again from the SBOMs", Test: "artifact/bomscan TestPinnedStore, TestDamagedIndex; deploy/bomscan TestForgedIndex"},
		{Where: "secret ferry-agent-tls tls.crt", Kind: Object, Bound: "the agent serves it only when tls.crt and tls.key (each at most 64 KiB) parse as a pair, else keeps the last good pair; the controller and init replace a pair that does not parse, has expired, names other hosts or is not signed by ca.crt (one CA certificate), and read next-tls.* (the rotation's pending pair) the same way; CA bundles read for at most 16 CA certificates, anything else in them dropped", Test: "deploy/servingcert TestSourceReloads, TestEnsureRepairs, TestStepRepairs"},
		{Where: "configmap ferry-agent-ca ca.crt", Kind: Object, Bound: "PEM read for at most 16 CA certificates, the rest and whatever is not a CA certificate dropped (a 1.5 MiB bundle of 2,625 leaf certificates: 73 ms, 29 MiB allocated); whether it holds the agent's CA is looked up over the whole bundle, so others' CAs before it do not hide it; a bundle that does not trust the agent's CA is mended by init and the controller, and others' CAs are trimmed from it once the agents serve the current certificate", Test: "deploy/servingcert TestEnsureRepairs, TestStepRepairs, TestRotatorBundleOfForeignCAs"},
		{Where: "configmap ferry-sbom-index digest", Kind: Object, Bound: "a digest, validated; the index manifest it names read by that digest and checked against it; any other value, or a manifest gone, is no index (made again from the SBOMs); written only by a user who may write ferry's (or the centre's) namespace", Test: "artifact/bomscan TestPinnedStore"},
		{Where: "configmap ferry-version generation", Kind: Object, Bound: "setUpGeneration and generation: decimal numbers in [0, 1000000], anything else refused in one line naming the key (cluster.ErrUnreadableRecord; --allow-downgrade runs over it, the formats and who set the cluster up then unknown, and init records itself); version and commit at most 64 printable characters each, else read as (unreadable); written only by a user who may write ferry's namespace", Test: "internal/cluster TestSetupFromData; deploy/install TestInitRecordsFormats"},
		{Where: "answer fleet receipt", Kind: Registry, Bound: "a member's receipt the fleet centre kept in its registry, read back: at most 64 MiB (artifact.MaxReceiptSize), checked against the digest its Member (or its receipts manifest) records, every digest in it checked; the receipts manifest at most 4 MiB (artifact.MaxManifestSize), checked against the digest its Member records, of the receipt artifact type, its layers' digests checked", Test: fleetTest},
	}
}

// fleetTest feeds the fleet centre's requests and stored answers their
// hostile cases.
const fleetTest = "deploy/fleet/centre TestHostileRequests, TestSyncBomb, TestSlowAndHugeBodies, TestBundleSlowReaders, TestBundleInFlight, TestSyncInFlight, TestBundleReceiptBomb, TestGuessing, TestImportForged, TestReceiptsReplaced, TestBundleFileWhole, TestJoinNameOracle, TestJoinLabels, TestJoinNames, FuzzHandler, TestJoin, TestSync, TestBundle, TestImport, TestBundleStoredReceiptsHostile"

func requests() []Entry {
	return []Entry{
		{Where: "request agent upload", Kind: Request, Bound: "--upload-max-bytes; the archive verified before anything is pushed", Test: "deploy/upload hostile tests"},
		{Where: "request agent admission review", Kind: Request, Bound: "a body read to at most 4 MiB (maxReviewSize; the API server sends at most 3 MiB), a longer one cut and refused 400; a GitOps source rewritten only where it names what a package carries, a revision of it that no package carries refused in one line naming what is carried, the source's URL in it without user information or query (internal/redact); ApplicationSet template expressions ({{...}}) left alone; ApplicationSet generators walked at most 3 levels deep (matrix, merge; 5,000 levels: 3 µs), 100,000 of them in 85 ms; an AppProject of 200,000 sourceRepos (4.6 MB) in 0.6 s, 83 MiB allocated", Test: "deploy/agent tests (TestSourceRewriter, TestArgoSources, TestArgoSourcesManyCharts, TestArgoRefusalRedactsURL, FuzzRewrite)"},
		{Where: "request git server", Kind: Request, Bound: "--timeout per request; wants and haves bounded; wrong passwords slowed and guesses in flight bounded (internal/authlimit: at most 64 attempts of one client unanswered (no status written, no body read) at once, only its free attempts left once it has failures, one once they are used; past it a request of a client without failures waits up to 10 s for a slot, others get 429 with Retry-After)", Test: "deploy/gitserver FuzzUploadPack and hostile tests"},
		{Where: "request dashboard", Kind: Request, Bound: "Host header checked; uploads as the agent's; login slowed after wrong passwords; a fleet report imported: at most 96 MiB (wire.MaxReportFile), its form read as a stream; a fleet bundle made, or a report imported, only for a user the API server lets update members/status (SelfSubjectAccessReview), asked before the centre's registry is touched; SBOM pages: a filter or query of at most 1 KiB (longer: one line on the page), at most 500 rows a page, 500 search hits and 2,000 findings listed (the rest counted), each cell cut at 256 bytes, everything escaped; an SBOM read only from the Package's own graph, checked against its digest, within bom.DefaultLimits (else 422 in one line), documents read kept to 256 MiB; a scan or the deployed database found as the user, kept 30 s; the database read once and kept in one copy by its package root digest, shared by the users who find that root", Test: "deploy/dashboard TestSBOMPage, TestSBOMHostile, TestSBOMSearch, TestSBOMAudit"},
		{Where: "request registry", Kind: Request, Bound: "distribution's own bounds; credentials checked before a body is read (no form parsed, a manifest read only once they pass); wrong passwords slowed and guesses in flight bounded (internal/authlimit: at most 64 attempts of one client unanswered (no status written, no body read) at once, only its free attempts left once it has failures, one once they are used; past it a request of a client without failures waits up to 10 s for a slot, others get 429 with Retry-After); on filesystem storage a write's Content-Length reserved against the free room above StorageReserve in one step (507 DENIED in one line past it), only by a request that fits or may push; an upload holding reserved room that sends nothing for a minute (UploadStall) is cut and its room given back", Test: "conformance suite; registry TestStorageFull, TestSpaceGuard*, TestCredentialsBeforeBody"},
		{Where: "request fleet join", Kind: Request, Bound: "a body of at most 64 KiB (wire.MaxJoinRequest), in within a minute (Centre.StallTimeout; else 408); the name, labels and public key checked before the token is looked at; the token's secret compared by its SHA-256 in constant time, its expiry and uses checked before the name is looked up (a stranger learns nothing of the members); labels of ferry's or Kubernetes' domains (fleet.ferry.dev/canary) refused unless the token gives them, the token's over the rest; a use taken with optimistic concurrency, none by a refused join; joins share 64 locks by token id, whatever ids are sent; an address whose tokens are refused more than 5 times answered 429 with Retry-After, for 1 s doubling to 5 min (internal/authlimit)", Test: fleetTest},
		{Where: "request fleet sync", Kind: Request, Bound: "the member's credential compared by its SHA-256 in constant time against its Member, read on every request (revoked or deleted: 403; one revoked while its sync is in flight is refused, its report not recorded); one sync of a member at a time (429); its body in within a minute (408); an address whose credentials for one member are refused more than 5 times answered 429 for that member, for 1 s doubling to 5 min (internal/authlimit); a body of at most 4 MiB (wire.MaxReport): at most 256 packages, 256 receipts of repositories and 64 labels, counted before any is decoded (413), names and digests checked, free text cut to a line; the receipt's every digest checked; at most 256 receipts of repositories, each named as a repository and checked as the receipt; a report's receipts replace the last one's in the centre's registry (those only the last named deleted), so a member keeps one set there however often it reports", Test: fleetTest},
		{Where: "request fleet bundle", Kind: Request, Bound: "the credential as sync's; one bundle request of a member at a time (429); a body of at most 64 MiB + 64 KiB (wire.MaxBundleRequest), each read within a minute (408), read and its delta made in one of two slots (the rest wait), the member read again after each wait (revoked meanwhile: 403); only a repository@digest of the member's own desired state; the receipt's every digest checked; the bundle sent outside the slots, cut off when the member reads nothing for a minute, its file removed", Test: fleetTest},
	}
}
