package install

import (
	"context"
	"time"

	"github.com/ferrypkg/ferry/deploy/servingcert"
)

// tls makes sure of the agent's certificates (servingcert.Ensure): those
// in TLSSecretName are kept unless they cannot serve (missing, garbled,
// expired, for other names), and every place that trusts them holds their
// CA. Rotation before expiry is the Package controller's
// (servingcert.Rotator), with the same options.
func (in *installer) tls(ctx context.Context) (servingcert.Ensured, error) {
	return servingcert.Ensure(ctx, in.cs, servingcert.AgentTarget(in.ns), in.opts.Certificates, time.Now())
}
