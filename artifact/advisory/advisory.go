// Package advisory reads vulnerability databases in OSV's format
// (https://ossf.github.io/osv-schema/) — a zip of records as osv.dev
// publishes them, or a folder of records as golang.org/x/vulndb keeps
// them — bounded, and matches SBOM components against them in each
// ecosystem's own version order (package bom's Compare, osv-scalibr's
// semantic). A database crosses the air gap as a package layer of media
// type artifact.MediaTypeAdvisories; ReadPackage reads and merges every
// such layer of a package.
package advisory

import (
	"fmt"
	"time"

	"github.com/google/osv-scalibr/semantic"
)

// Limits bound what Load, LoadDir and ReadPackage read. A zero field
// takes its DefaultLimits value.
type Limits struct {
	// MaxBytes bounds the records' bytes together, as read (a zip's
	// expanded size): 2 GiB.
	MaxBytes int64
	// MaxRecords bounds the records of one database (a zip's entries, a
	// folder's files): 1,000,000, twice osv.dev's all.zip of every
	// ecosystem (~450,000 records in 2025).
	MaxRecords int
	// MaxRecordBytes bounds one record: 4 MiB (the largest osv.dev record,
	// one listing every affected version of a long-lived package, is
	// under 1 MiB).
	MaxRecordBytes int64
	// MaxAffected bounds a record's affected entries, and its aliases:
	// 10,000.
	MaxAffected int
	// MaxEvents bounds the events of a record's ranges together: 10,000.
	MaxEvents int
	// MaxVersions bounds the versions a record lists, together: 100,000.
	MaxVersions int
	// MaxString bounds every string kept (ids, names, versions,
	// summaries): 16 KiB.
	MaxString int
}

// DefaultLimits are the limits a zero Limits field takes.
var DefaultLimits = Limits{
	MaxBytes:       2 << 30,
	MaxRecords:     1_000_000,
	MaxRecordBytes: 4 << 20,
	MaxAffected:    10_000,
	MaxEvents:      10_000,
	MaxVersions:    100_000,
	MaxString:      16 << 10,
}

// withDefaults fills lim's zero fields from DefaultLimits.
func (lim Limits) withDefaults() Limits {
	d := DefaultLimits
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = d.MaxBytes
	}
	if lim.MaxRecords <= 0 {
		lim.MaxRecords = d.MaxRecords
	}
	if lim.MaxRecordBytes <= 0 {
		lim.MaxRecordBytes = d.MaxRecordBytes
	}
	if lim.MaxAffected <= 0 {
		lim.MaxAffected = d.MaxAffected
	}
	if lim.MaxEvents <= 0 {
		lim.MaxEvents = d.MaxEvents
	}
	if lim.MaxVersions <= 0 {
		lim.MaxVersions = d.MaxVersions
	}
	if lim.MaxString <= 0 {
		lim.MaxString = d.MaxString
	}
	return lim
}

// DB is a vulnerability database held in memory, its affected entries
// indexed by ecosystem and package name, so that Match is a map lookup.
// A DB is safe for concurrent Match once loaded.
type DB struct {
	lim     Limits
	records []record
	// ids maps a record's id to its index: a record two layers carry is
	// kept once.
	ids map[string]int32
	// index maps key(ecosystem, name) to the entries of that package.
	index map[string][]entry
	// strs interns the strings many entries repeat (ecosystems, names,
	// versions).
	strs map[string]string
	// parsed holds each event version parsed once, by key(ecosystem,
	// version): Match compares, never parses, what records hold.
	parsed  map[string]semantic.Version
	date    time.Time
	bytes   int64
	entries int
}

// record is what a DB keeps of an OSV record.
type record struct {
	id       string
	aliases  []string
	summary  string
	severity string
}

// entry is one affected[] entry of a record.
type entry struct {
	rec int32
	// ecosystem is the entry's ecosystem as the record spells it
	// ("Debian:12"); release its part after the first ":" ("12").
	ecosystem, release string
	ranges             []vrange
	// versions are the listed versions, sorted, for a binary search.
	versions []string
}

// vrange is a SEMVER or ECOSYSTEM range: its events in the record's
// order, each version parsed; an event whose version is none of its
// ecosystem's (bom.Plausible, or one its order cannot read) is left out.
type vrange struct {
	events []event
}

// Kinds of range events.
const (
	introduced = iota
	fixed
	lastAffected
	limit
)

type event struct {
	kind    uint8
	version string
	// v is version parsed; nil for an introduced "0", below every other.
	v semantic.Version
}

// New returns an empty database that records are loaded into with lim.
func New(lim Limits) *DB {
	return &DB{lim: lim.withDefaults(), ids: map[string]int32{}, index: map[string][]entry{}, strs: map[string]string{}, parsed: map[string]semantic.Version{}}
}

// Len is the number of records the database holds (withdrawn ones are
// skipped, a record several sources carry counted once).
func (db *DB) Len() int { return len(db.records) }

// Date is the newest `modified` time of the database's records (a
// record's `published` time where its `modified` is missing or zero, as
// in golang.org/x/vulndb's data/osv): how current it is. Zero for an
// empty database.
func (db *DB) Date() time.Time { return db.date }

// Entries is the number of affected entries the database indexes.
func (db *DB) Entries() int { return db.entries }

// LimitError is a database over one of its Limits; Record names the
// record (its id, or its file) where one is to blame.
type LimitError struct {
	Record string
	What   string
	Got    int64
	Max    int64
}

func (e *LimitError) Error() string {
	if e.Record == "" {
		return fmt.Sprintf("advisory database: %s: %d, more than %d", e.What, e.Got, e.Max)
	}
	return fmt.Sprintf("advisory %s: %s: %d, more than %d", e.Record, e.What, e.Got, e.Max)
}
