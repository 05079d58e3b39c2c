package inputs

// sbomCLI is `ferry sbom query` and `ferry sbom audit` (cmd/ferry/sbom_scan.go,
// sbom_audit.go): SBOMs read from a package, a registry, a cluster or a
// fleet's centre, and an advisory database.
func sbomCLI() []Entry {
	const (
		query    = "ferry sbom query"
		audit    = "ferry sbom audit"
		deadKube = " --kubeconfig {kube}"
		sboms    = "; each SBOM a referrer manifest of the package's graph that ferry.json records, its document at most 64 MiB (artifact.MaxSBOMSize) checked against its digest as read, its components read under bom's limits; at most 10,000 packages (bomscan.MaxPackages) and 100,000 SBOMs (bomscan.MaxSBOMs) a scan, each counted as it is listed"
		db       = "the advisory database: a folder of OSV JSON records or a zip of them (each record, the record count and the zip's entries bounded by advisory's limits; an empty one refused), or a package carrying one (read as `package verify ARGS`, its advisories layer as the zip)"
	)
	return concat(
		[]Entry{
			{Where: query + " ARGS", Kind: Package, Bound: "QUERY: a package URL with an optional version range, or a name (bom.ParseQuery's bounds); PKG|REF: " + boundPackage + sboms, Try: "sbom query libferry1 {}"},
			{Where: query + " --registry", Kind: Registry, Bound: boundRegistry + "; every repository of its catalog (under PREFIX) and every tag, as `registry have`'s listing, at most 100,000 tags in all (bomscan.MaxTags), listed before any is resolved" + sboms, Try: "sbom query libferry1 --registry {host}"},
			{Where: audit + " ARGS", Kind: Package, Bound: boundPackage + sboms, Try: "sbom audit {} --db {osv}"},
			{Where: audit + " --db", Kind: Package, Bound: db, Try: "sbom audit {pkg} --db {}"},
			{Where: audit + " --key", Kind: File, Bound: boundKeyFile, Try: "sbom audit {pkg} --db {pkg} --key {}"},
			{Where: audit + " --registry", Kind: Registry, Bound: boundRegistry + "; as `sbom query --registry`", Try: "sbom audit --registry {host} --db {osv}"},
		},
		none(query, "--cluster", "--fleet", "--namespace", "--rebuild", "--registry-via"),
		none(audit, "--cluster", "--fleet", "--namespace", "--rebuild", "--registry-via", "--max-age"),
		remote(query, "sbom query libferry1 "+"{reg}/test/pkg:0.1.0"), output(query),
		remote(audit, "sbom audit {reg}/test/pkg:0.1.0 --db {osv}"), output(audit),
		kube(query, "sbom query libferry1 --cluster"),
		kube(audit, "sbom audit --cluster --db {osv}"),
	)
}
