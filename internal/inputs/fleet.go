package inputs

// fleetMember is what a fleet member's agent (deploy/fleet/member) reads:
// the centre's answers, and its Secret ferry-fleet, which `ferry fleet
// join` and `ferry fleet report` write and a person may edit.
func fleetMember() []Entry {
	const (
		test   = "deploy/fleet/member TestHostileCentre, TestStalledCentre, TestCentreRedirect, TestHandDeployedPackage, TestJoin, TestJoinPinsCA; deploy/fleet/wire TestDecodeBounds"
		secret = "secret ferry-fleet "
		pinned = "read only over a connection whose chain holds the CA the token (or the CA kept since) pins, the leaf chaining to it (wire.PinnedTLS), a redirect never followed: nothing is sent to another server"
	)
	return []Entry{
		{Where: "answer fleet centre join", Kind: Answer, Test: test,
			Bound: "JSON of at most 64 KiB (wire.MaxJoinRequest), whole within 2 min (Agent.RequestTimeout), " + pinned + "; the member it names must be a DNS label, the one asked for when one was, and the credential `<member>.<64 hex digits>`"},
		{Where: "answer fleet centre sync", Kind: Answer, Test: test,
			Bound: "JSON of at most 4 MiB (wire.MaxDesired), whole within 2 min (Agent.RequestTimeout), at most 256 packages, counted before any is decoded (wire.Desired.UnmarshalJSON), " + pinned + "; every desired package checked before anything is done with it — its name a Kubernetes name, its placement a label value, its repository a repository name, its digest `sha256:<64 hex digits>`, its values a JSON object, at most 64 components, a timeout of 0 to 24 h — one that does not is refused in one line; one named as a Package no placement put there (deployed by hand) is left alone, never deployed over nor deleted (NotPlaced); the interval held to 5 s – 1 h"},
		{Where: "answer fleet centre bundle", Kind: Answer, Test: test,
			Bound: "streamed to a file in the agent's --upload-dir, at most --upload-max-bytes, cut off once no byte has come for a minute (Agent.StallTimeout), the file removed; opened as a package (docs/limits.md's package limits), its root must be the digest asked for and its name the package's, and it is verified with the cluster's own trusted keys before anything is pushed or applied"},
		{Where: "answer fleet centre error", Kind: Answer, Test: test,
			Bound: "a refusal's body read to at most 4 KiB, its first line, cut at 64 characters"},
		{Where: secret + "url", Kind: Object, Test: test, Bound: "https://host[:port] and nothing more (wire.CheckURL), checked before each connection"},
		{Where: secret + "token", Kind: Object, Test: test, Bound: "`ff1.<id>.<secret>.<ca>` (wire.ParseToken), never repeated in a message; deleted once traded"},
		{Where: secret + "name", Kind: Object, Bound: "a DNS label (wire.ValidMemberName)"},
		{Where: secret + "labels", Kind: Object, Bound: "a JSON object of at most 64 labels, each key a qualified name and each value a label value"},
		{Where: secret + "mode", Kind: None, Bound: "Carried, or else Connected"},
		{Where: secret + "siteKey", Kind: Object, Bound: "a PKCS #8 PEM ECDSA P-256 key (wire.ParseSiteKey); one that does not parse is an error, never replaced"},
		{Where: secret + "publicKey", Kind: None, Bound: "made again from siteKey each time the key is made sure of"},
		{Where: secret + "credential", Kind: Object, Bound: "sent only as the bearer token of requests to the pinned centre"},
		{Where: secret + "ca", Kind: Object, Test: test, Bound: "one PEM certificate, whose SHA-256 is the pin of every connection (wire.CAPin)"},
		{Where: secret + "joinedAt", Kind: Object, Bound: "an RFC 3339 time"},
		{Where: secret + "lastSync", Kind: Object, Bound: "an RFC 3339 time"},
		{Where: secret + "error", Kind: None, Bound: "written by the agent, shown as it is"},
	}
}
