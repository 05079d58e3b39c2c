package thirdparty

import (
	"os"
	"path/filepath"
	"testing"
)

func TestChartsAreThere(t *testing.T) {
	for _, c := range append(Charts, Kyverno119) {
		d := c.Dir(t)
		if _, err := os.Stat(filepath.Join(d, "values.yaml")); err != nil {
			t.Errorf("%s@%s: %v", c.Name, c.Version, err)
		}
	}
}
