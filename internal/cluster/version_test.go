package cluster

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

// TestSetupData pins the keys of the ferry-version ConfigMap: a later
// ferry reads them to decide whether it may init (a change needs a new
// FormatGeneration and a migration).
func TestSetupData(t *testing.T) {
	s := Setup{
		SetUpBy:  Ferry{Version: "v0.9.0", Commit: "53a21d76b27e90e3a1badb0161d4ec97e0482888", Generation: 1},
		LastInit: Ferry{Version: "v1.0.0", Commit: "0123456789abcdef", Generation: 2},
	}
	want := map[string]string{
		"setUpVersion": "v0.9.0", "setUpCommit": "53a21d76b27e90e3a1badb0161d4ec97e0482888", "setUpGeneration": "1",
		"version": "v1.0.0", "commit": "0123456789abcdef", "generation": "2",
	}
	if got := s.Data(); !maps.Equal(got, want) {
		t.Errorf("Data() = %v, want %v", got, want)
	}
	back, err := SetupFromData(want)
	if err != nil || back != s {
		t.Errorf("SetupFromData = %+v, %v; want %+v", back, err, s)
	}
	if s.Generation() != 2 {
		t.Errorf("Generation() = %d", s.Generation())
	}
}

// TestSetupFromData: what a user may have written in the ConfigMap is read
// bounded: a generation that is not a small number is refused naming the
// key; a version or commit of another shape is "(unreadable)", never
// printed as it is.
func TestSetupFromData(t *testing.T) {
	for _, data := range []map[string]string{
		{"generation": "x"}, {"generation": "-1"}, {"setUpGeneration": "99999999999999999999"}, {"generation": "1e3"},
	} {
		_, err := SetupFromData(data)
		if err == nil || !strings.Contains(err.Error(), "generation") || strings.Contains(err.Error(), "\n") {
			t.Errorf("SetupFromData(%v) = %v, want a one-line error naming the key", data, err)
		}
	}
	s, err := SetupFromData(map[string]string{"version": strings.Repeat("v", 1<<20), "commit": "abc\ndef", "setUpVersion": "v1 2"})
	if err != nil {
		t.Fatal(err)
	}
	if s.LastInit.Version != "(unreadable)" || s.LastInit.Commit != "(unreadable)" || s.SetUpBy.Version != "(unreadable)" {
		t.Errorf("hostile version read as %+v", s)
	}
	empty, err := SetupFromData(nil)
	if err != nil || empty != (Setup{}) {
		t.Errorf("SetupFromData(nil) = %+v, %v", empty, err)
	}
}

func TestCheckGeneration(t *testing.T) {
	running := Ferry{Version: "v1.0.0", Commit: "aaaaaaaaaaaaaaaaaaaa", Generation: 2}
	for _, s := range []Setup{
		{}, // a cluster an earlier ferry set up, or none
		{SetUpBy: Ferry{Generation: 1}, LastInit: Ferry{Generation: 2}},
		{LastInit: Ferry{Generation: 1}},
	} {
		if err := CheckGeneration(s, running); err != nil {
			t.Errorf("CheckGeneration(%+v) = %v", s, err)
		}
	}
	newer := Setup{SetUpBy: Ferry{Version: "v0.9.0", Generation: 1}, LastInit: Ferry{Version: "v1.1.0", Commit: "bbbbbbbbbbbbbbbbbbbb", Generation: 3}}
	err := CheckGeneration(newer, running)
	var de *DowngradeError
	if !errors.As(err, &de) || !errors.Is(err, ErrDowngrade) || de.Recorded != newer.LastInit {
		t.Fatalf("CheckGeneration(newer) = %v", err)
	}
	want := "the cluster holds formats of generation 3, written by ferry v1.1.0 (commit bbbbbbbbbbbb, formats 3); this ferry is v1.0.0 (commit aaaaaaaaaaaa, formats 2)"
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant\n%s", err, want)
	}
	// A downgrade allowed once leaves the newer generation in SetUpBy.
	if err := CheckGeneration(Setup{SetUpBy: Ferry{Generation: 3}, LastInit: Ferry{Generation: 1}}, running); !errors.As(err, &de) || de.Recorded.Generation != 3 {
		t.Errorf("set up by a newer ferry: %v", err)
	}
	if got := (Ferry{Generation: 0}).String(); got != "unknown (formats 0)" {
		t.Errorf("unknown ferry: %q", got)
	}
}
