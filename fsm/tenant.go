package fsm

import (
	"fmt"
	"strings"
)

// Tenants (docs/tenancy.md). A queue of tenant T is named "T/NAME"; a name
// without '/' belongs to no tenant. The tenant is read from the name, so
// every replica derives it alike and no queue ever changes tenant.

// MaxTenantNameLen caps a tenant name.
const MaxTenantNameLen = 64

// TenantSep separates a tenant from its queue's own name.
const TenantSep = "/"

// TenantOf is the tenant a queue belongs to, "" for none.
func TenantOf(queue string) string {
	t, _, ok := strings.Cut(queue, TenantSep)
	if !ok {
		return ""
	}
	return t
}

// ValidateTenantName checks a tenant name: 1 to MaxTenantNameLen
// characters of [a-z0-9_-], starting with a letter or digit. Lower case
// only, so "Acme" and "acme" cannot both exist and read alike.
func ValidateTenantName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: tenant name is empty", ErrInvalidArgument)
	}
	if len(name) > MaxTenantNameLen {
		return fmt.Errorf("%w: tenant name is %d bytes, limit %d", ErrInvalidArgument, len(name), MaxTenantNameLen)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '_' || c == '-'))
		if !ok {
			return fmt.Errorf("%w: tenant name %q: use [a-z0-9_-], starting with a letter or a digit", ErrInvalidArgument, name)
		}
	}
	return nil
}

// validateQueueChars checks the part of a queue name after its tenant.
func validateQueueChars(full, own string) error {
	if own == "" {
		return fmt.Errorf("%w: queue name %q has nothing after its tenant", ErrInvalidArgument, full)
	}
	// By rune, so a multi-byte character is named whole, not by its first
	// byte.
	for _, c := range own {
		if !nameChar(c) {
			return fmt.Errorf("%w: queue name %q has character %q outside [A-Za-z0-9._-]", ErrInvalidArgument, full, c)
		}
	}
	return nil
}
