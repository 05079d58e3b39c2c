package main

import (
	"errors"

	"github.com/spf13/cobra"
	"oras.land/oras-go/v2"

	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bomscan"
)

// readAdvisories reads the advisory database a package carries.
// TODO(part B): artifact.ReadAdvisories once merged.
func readAdvisories(cmd *cobra.Command, src oras.ReadOnlyTarget, ref string) (*advisory.DB, error) {
	return nil, errors.New("database packages: not yet")
}

// clusterDB is the database deployed in the cluster s scans.
func clusterDB(cmd *cobra.Command, s *bomscan.Scanner) (*auditDB, error) {
	return nil, errors.New("the cluster's database: not yet")
}
