package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/ferrypkg/ferry/artifact"
)

// credentialStore is the docker config file's store, as docker, crane,
// oras and helm read it ($DOCKER_CONFIG/config.json or
// ~/.docker/config.json), with its credential helper if one is configured.
func credentialStore() (*credentials.DynamicStore, error) {
	return artifact.DockerCredentials(credentials.StoreOptions{AllowPlaintextPut: true, DetectDefaultNativeStore: true})
}

// loginHost is the registry host of a login or logout argument: a host
// name, a reference, or a URL.
func loginHost(arg string) string {
	if _, rest, ok := strings.Cut(arg, "://"); ok {
		arg = rest
	}
	return registryHost(arg)
}

func newRegistryLoginCmd() *cobra.Command {
	var remote RemoteFlags
	cmd := &cobra.Command{
		Use:   "login REGISTRY -u USER --password-stdin",
		Short: "Log in to a registry: check the credentials and keep them in the docker config file",
		Long: `Check a user name and password (or token) against REGISTRY and store them
where docker, crane, oras and helm read them: the docker config file
($DOCKER_CONFIG/config.json or ~/.docker/config.json), or its credential
helper when one is configured. Without a helper the password is stored
unencrypted (base64), as docker stores it. The password is read from standard
input (--password-stdin) or $` + PasswordEnvRegistry + `, never from an argument.`,
		Example: `  ferry registry login registry.example:5000 -u ci --password-stdin < token
  ferry registry login 127.0.0.1:5000 -u admin --password-stdin --ca-file ca.crt <<< "$PASSWORD"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if remote.Username == "" {
				return errors.New("--username is required")
			}
			if !remote.PasswordStdin && passwordFromEnv() == "" {
				return fmt.Errorf("no password: pass --password-stdin (or set %s)", PasswordEnvRegistry)
			}
			host := loginHost(args[0])
			pw, err := remote.Password(cmd.InOrStdin())
			if err != nil {
				return err
			}
			ro, err := remote.transport(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			reg, err := ro.Registry(host)
			if err != nil {
				return err
			}
			store, err := credentialStore()
			if err != nil {
				return err
			}
			if err := credentials.Login(cmd.Context(), store, reg, auth.Credential{Username: remote.Username, Password: pw}); err != nil {
				return fmt.Errorf("login to %s: %w", host, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s as %s (credentials in %s)\n", host, remote.Username, store.ConfigPath())
			return nil
		},
	}
	remote.Register(cmd)
	return cmd
}

func newRegistryLogoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout REGISTRY",
		Short: "Forget a registry's credentials in the docker config file",
		Example: `  ferry registry logout registry.example.com
  ferry registry logout 127.0.0.1:5000`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			host := loginHost(args[0])
			store, err := credentialStore()
			if err != nil {
				return err
			}
			if err := credentials.Logout(cmd.Context(), store, host); err != nil {
				return fmt.Errorf("logout from %s: %w", host, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged out of %s (%s)\n", host, store.ConfigPath())
			return nil
		},
	}
}
