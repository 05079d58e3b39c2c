package zarf

// KnownFields exposes knownFields to the schema test.
var KnownFields = knownFields

// NodeBound exposes nodeBound to TestNodeBound.
var NodeBound = nodeBound
