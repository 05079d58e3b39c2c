//go:build tools

// Package deps pins the module's chosen dependencies in go.mod before the code
// that uses them lands, so parallel work never has to edit go.mod at once.
// Delete an import here once real code imports its package.
package deps

import (
	_ "github.com/distribution/distribution/v3/configuration"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	_ "github.com/distribution/reference"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/opencontainers/go-digest"
	_ "github.com/opencontainers/image-spec/specs-go/v1"
	_ "github.com/sigstore/cosign/v2/pkg/cosign"
	_ "github.com/sigstore/cosign/v2/pkg/oci/static"
	_ "github.com/sigstore/sigstore/pkg/signature"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/term"
	_ "gopkg.in/yaml.v3"
	_ "helm.sh/helm/v3/pkg/action"
	_ "helm.sh/helm/v3/pkg/chart/loader"
	_ "helm.sh/helm/v3/pkg/chartutil"
	_ "helm.sh/helm/v3/pkg/registry"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "oras.land/oras-go/v2"
	_ "oras.land/oras-go/v2/content/oci"
	_ "oras.land/oras-go/v2/registry/remote"
	_ "oras.land/oras-go/v2/registry/remote/credentials"
	_ "sigs.k8s.io/yaml"
)
