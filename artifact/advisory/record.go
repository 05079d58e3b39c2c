package advisory

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/osv-scalibr/semantic"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// osvRecord is the part of an OSV record a DB keeps; every other field
// (details, references, credits, ecosystem_specific…) is skipped by the
// decoder without being held.
type osvRecord struct {
	ID               string        `json:"id"`
	Modified         string        `json:"modified"`
	Published        string        `json:"published"`
	Withdrawn        string        `json:"withdrawn"`
	Aliases          []string      `json:"aliases"`
	Summary          string        `json:"summary"`
	Severity         []osvSeverity `json:"severity"`
	Affected         []osvAffected `json:"affected"`
	DatabaseSpecific dbSpecific    `json:"database_specific"`
}

type osvSeverity struct {
	Type  string `json:"type"`
	Score string `json:"score"`
}

type osvAffected struct {
	Package struct {
		Ecosystem string `json:"ecosystem"`
		Name      string `json:"name"`
	} `json:"package"`
	Ranges []struct {
		Type   string `json:"type"`
		Events []struct {
			Introduced   string `json:"introduced"`
			Fixed        string `json:"fixed"`
			LastAffected string `json:"last_affected"`
			Limit        string `json:"limit"`
		} `json:"events"`
	} `json:"ranges"`
	Versions         []string      `json:"versions"`
	Severity         []osvSeverity `json:"severity"`
	DatabaseSpecific dbSpecific    `json:"database_specific"`
}

// dbSpecific keeps database_specific's severity when it is a string (as
// GitHub's advisories write it), and nothing else of that free-form object.
type dbSpecific struct{ Severity string }

func (d *dbSpecific) UnmarshalJSON(data []byte) error {
	var v struct {
		Severity json.RawMessage `json:"severity"`
	}
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	_ = json.Unmarshal(v.Severity, &d.Severity)
	return nil
}

// add decodes the record data (from the file or zip entry name) and adds
// it to db, checked against db's limits.
func (db *DB) add(name string, data []byte) error {
	lim := db.lim
	db.bytes += int64(len(data))
	if db.bytes > lim.MaxBytes {
		return &LimitError{What: "bytes of records", Got: db.bytes, Max: lim.MaxBytes}
	}
	var r osvRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: not an OSV record: %v", name, err)
	}
	who := r.ID
	if who == "" || len(who) > lim.MaxString {
		return fmt.Errorf("%s: not an OSV record: no id, or one longer than %d bytes", name, lim.MaxString)
	}
	if err := checkRecord(&r, lim); err != nil {
		return err
	}
	if t := recordTime(&r); t.After(db.date) {
		db.date = t
	}
	if r.Withdrawn != "" {
		return nil
	}
	if _, dup := db.ids[r.ID]; dup {
		return nil
	}
	if len(db.records) >= lim.MaxRecords {
		return &LimitError{What: "records", Got: int64(len(db.records)) + 1, Max: int64(lim.MaxRecords)}
	}
	rec := record{id: r.ID, summary: r.Summary, severity: severity(r.Severity, r.DatabaseSpecific)}
	if len(r.Aliases) > 0 {
		rec.aliases = append([]string(nil), r.Aliases...)
	}
	ri := int32(len(db.records))
	db.records = append(db.records, rec)
	db.ids[r.ID] = ri
	for _, a := range r.Affected {
		eco := a.Package.Ecosystem
		base, release, _ := strings.Cut(eco, ":")
		if base == "" || a.Package.Name == "" {
			continue
		}
		e := entry{rec: ri, ecosystem: db.intern(eco), release: db.intern(release)}
		for _, rg := range a.Ranges {
			if rg.Type != "SEMVER" && rg.Type != "ECOSYSTEM" {
				continue // GIT ranges name commits, which no SBOM records
			}
			var vr vrange
			for _, ev := range rg.Events {
				switch {
				case ev.Introduced != "":
					vr.events = db.appendEvent(vr.events, base, introduced, ev.Introduced)
				case ev.Fixed != "":
					vr.events = db.appendEvent(vr.events, base, fixed, ev.Fixed)
				case ev.LastAffected != "":
					vr.events = db.appendEvent(vr.events, base, lastAffected, ev.LastAffected)
				case ev.Limit != "":
					vr.events = db.appendEvent(vr.events, base, limit, ev.Limit)
				}
			}
			if len(vr.events) > 0 {
				e.ranges = append(e.ranges, vr)
			}
		}
		for _, v := range a.Versions {
			e.versions = append(e.versions, db.intern(v))
		}
		slices.Sort(e.versions)
		e.versions = slices.Compact(e.versions)
		if len(e.ranges) == 0 && len(e.versions) == 0 {
			continue
		}
		if rec.severity == "" {
			if s := severity(a.Severity, a.DatabaseSpecific); s != "" {
				db.records[ri].severity = s
			}
		}
		k := key(base, a.Package.Name)
		db.index[k] = append(db.index[k], e)
		db.entries++
	}
	return nil
}

// recordTime is when r last changed: its modified time, or its published
// time where modified is missing or zero (golang.org/x/vulndb's data/osv
// leaves modified zero: vuln.go.dev sets it when it publishes).
func recordTime(r *osvRecord) time.Time {
	for _, s := range []string{r.Modified, r.Published} {
		if t, err := time.Parse(time.RFC3339, s); err == nil && t.Year() > 1 {
			return t.UTC()
		}
	}
	return time.Time{}
}

// checkRecord holds r to lim: counts and the length of every string kept.
func checkRecord(r *osvRecord, lim Limits) error {
	over := func(what string, got, max int) error {
		if got > max {
			return &LimitError{Record: r.ID, What: what, Got: int64(got), Max: int64(max)}
		}
		return nil
	}
	str := func(what, s string) error { return over(what+" length", len(s), lim.MaxString) }
	if err := over("affected entries", len(r.Affected), lim.MaxAffected); err != nil {
		return err
	}
	if err := over("aliases", len(r.Aliases), lim.MaxAffected); err != nil {
		return err
	}
	if err := str("summary", r.Summary); err != nil {
		return err
	}
	for _, a := range r.Aliases {
		if err := str("alias", a); err != nil {
			return err
		}
	}
	for _, s := range r.Severity {
		if err := str("severity", s.Score); err != nil {
			return err
		}
	}
	if err := str("severity", r.DatabaseSpecific.Severity); err != nil {
		return err
	}
	events, versions := 0, 0
	for _, a := range r.Affected {
		if err := str("package ecosystem", a.Package.Ecosystem); err != nil {
			return err
		}
		if err := str("package name", a.Package.Name); err != nil {
			return err
		}
		for _, rg := range a.Ranges {
			events += len(rg.Events)
			if err := over("range events", events, lim.MaxEvents); err != nil {
				return err
			}
			for _, ev := range rg.Events {
				if err := str("version", ev.Introduced+ev.Fixed+ev.LastAffected+ev.Limit); err != nil {
					return err
				}
			}
		}
		versions += len(a.Versions)
		if err := over("versions", versions, lim.MaxVersions); err != nil {
			return err
		}
		for _, v := range a.Versions {
			if err := str("version", v); err != nil {
				return err
			}
		}
		for _, s := range a.Severity {
			if err := str("severity", s.Score); err != nil {
				return err
			}
		}
	}
	return nil
}

// severity is the first CVSS vector (or other scored severity) of a
// record, else its database's own severity word.
func severity(ss []osvSeverity, d dbSpecific) string {
	for _, s := range ss {
		if s.Score != "" {
			return s.Score
		}
	}
	return d.Severity
}

// appendEvent appends an event of kind at version s of ecosystem base
// (its name before any ":") to evs, its version parsed once for the whole
// database; a version that is none of base's is left out. An introduced
// "0" is kept unparsed: it is below every version.
func (db *DB) appendEvent(evs []event, base string, kind uint8, s string) []event {
	if kind == introduced && s == "0" {
		return append(evs, event{kind: kind, version: "0"})
	}
	if !bom.Plausible(s) {
		return evs
	}
	k := base + "\x00" + s
	v, ok := db.parsed[k]
	if !ok {
		var err error
		if v, err = semantic.Parse(s, base); err != nil {
			v = nil
		}
		db.parsed[k] = v
	}
	if v == nil {
		return evs
	}
	return append(evs, event{kind: kind, version: db.intern(s), v: v})
}

// intern returns one shared copy of s.
func (db *DB) intern(s string) string {
	if v, ok := db.strs[s]; ok {
		return v
	}
	db.strs[s] = s
	return s
}

// key is the index key of a package: its ecosystem's base name and its
// name normalized as that ecosystem compares names.
func key(base, name string) string {
	return base + "\x00" + normalizeName(base, name)
}

// normalizeName is name as its ecosystem compares names: PyPI's per PEP
// 503 (lowercase, runs of "-", "_" and "." one "-"); every other
// ecosystem's exactly.
func normalizeName(base, name string) string {
	if base != "PyPI" {
		return name
	}
	return bom.PEP503(name)
}
