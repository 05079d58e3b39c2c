package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// AgentRotator is the Rotator of the agent's certificate in ferry's
// namespace ns, asking the agents behind its Service what they present.
func AgentRotator(cs kubernetes.Interface, ns string, o Options, log *slog.Logger) *Rotator {
	t := AgentTarget(ns)
	return &Rotator{Client: cs, Target: t, Options: o, Logger: log, Presented: Presented(cs, t, cluster.AgentName, "https")}
}

// presentTimeout bounds one handshake with a server.
const presentTimeout = 3 * time.Second

// Presented returns a Rotator.Presented that asks each server behind
// Service service of the target's namespace, at its port named port, for
// its certificate: a TLS handshake with each address its EndpointSlices
// list. A ready address that does not answer is an error (the old CA
// stays); one that is not ready is skipped.
func Presented(cs kubernetes.Interface, t Target, service, port string) func(context.Context) ([]*x509.Certificate, error) {
	return func(ctx context.Context) ([]*x509.Certificate, error) {
		slices, err := cs.DiscoveryV1().EndpointSlices(t.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return nil, err
		}
		var certs []*x509.Certificate
		for _, s := range slices.Items {
			var p int32
			for _, sp := range s.Ports {
				if sp.Name != nil && *sp.Name == port && sp.Port != nil {
					p = *sp.Port
				}
			}
			if p == 0 {
				continue
			}
			for _, e := range s.Endpoints {
				ready := e.Conditions.Ready == nil || *e.Conditions.Ready
				for _, a := range e.Addresses {
					c, err := presented(ctx, net.JoinHostPort(a, strconv.Itoa(int(p))), t.DNSNames)
					switch {
					case err == nil:
						certs = append(certs, c)
					case ready:
						return nil, err
					}
				}
			}
		}
		return certs, nil
	}
}

// presented is the certificate the server at addr presents for names[0].
// It is read, not trusted: the Rotator compares it with the Secret's.
func presented(ctx context.Context, addr string, names []string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, presentTimeout)
	defer cancel()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} // #nosec G402 -- read only, compared with the Secret's
	if len(names) > 0 {
		cfg.ServerName = names[0]
	}
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the server at %s: %w", addr, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("the server at %s presents no certificate", addr)
	}
	return certs[0], nil
}
