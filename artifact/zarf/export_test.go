package zarf

// KnownFields exposes knownFields to the schema test.
var KnownFields = knownFields
