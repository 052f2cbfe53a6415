package host_test

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// The public packages: what a plugin author or an embedding program imports. Their exported
// API must name only their own types, abi's and the standard library's (and other modules'):
// never a type of the module's internal packages, which an outsider can neither import nor
// construct, and which would tie their builds to the host's insides.
var publicPatterns = []string{
	"github.com/hermes-host/hermes-host/abi/...",
	"github.com/hermes-host/hermes-host/sdk/...",
	"github.com/hermes-host/hermes-host/conformance/...",
	"github.com/hermes-host/hermes-host/host/...",
}

// TestPublicAPINamesNoInternalType walks every exported function, method, variable, constant,
// type definition, struct field and interface method of the public packages and fails on each
// that names a type of an internal package.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	pkgs := load(t, publicPatterns...)
	n := 0
	var bad []string
	for _, p := range pkgs {
		if isInternal(p.PkgPath) || p.Name == "main" {
			continue
		}
		n++
		bad = append(bad, internalMentions(p)...)
	}
	if n < 10 {
		t.Fatalf("only %d public packages loaded: the patterns match less than the module's public API", n)
	}
	if len(bad) > 0 {
		t.Fatalf("exported API of public packages names internal types:\n  %s", strings.Join(bad, "\n  "))
	}
}

// The walk finds internal types wherever a signature can hide them: the fixture package (which
// no public pattern matches) leaks one through each kind of declaration.
func TestPublicAPICheckFindsLeaks(t *testing.T) {
	pkgs := load(t, "./testdata/leaky")
	got := internalMentions(pkgs[0])
	want := []string{
		"leaky.Alias = plugin.Env",
		"leaky.Config.Env: *plugin.Env",
		"leaky.Embeds: embeds kv.Store",
		"leaky.Func: func() (*plugin.Plugin, error)",
		"leaky.Iface.Load: func(plugin.Limits)",
		"leaky.Map: map[string][]plugin.Rejection",
		"leaky.Named: defined as plugin.Limits",
		"leaky.Var: func(plugin.Caller)",
		"leaky.T.Method: func(chan<- plugin.Info)",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("not found: %s", w)
		}
	}
	for _, g := range got {
		if strings.Contains(g, ".fine") || strings.Contains(g, "Fine") {
			t.Errorf("reported what names no internal type: %s", g)
		}
	}
	if t.Failed() {
		t.Logf("found:\n  %s", strings.Join(got, "\n  "))
	}
}

func load(t *testing.T, patterns ...string) []*packages.Package {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Fatalf("%s: %v", p.PkgPath, e)
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("no packages match %v", patterns)
	}
	return pkgs
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

// internalMentions lists each exported declaration of p whose type names an internal type.
func internalMentions(p *packages.Package) []string {
	pkg := p.Types
	rhs := map[types.Object]types.Type{} // each type declaration's right-hand side
	for _, f := range p.Syntax {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, spec := range g.Specs {
					ts := spec.(*ast.TypeSpec)
					rhs[p.TypesInfo.Defs[ts.Name]] = p.TypesInfo.TypeOf(ts.Type)
				}
			}
		}
	}
	var out []string
	report := func(where string, t types.Type) {
		if leaks(t, map[types.Type]bool{}) {
			out = append(out, where+": "+types.TypeString(t, qualifier(pkg)))
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		where := pkg.Name() + "." + name
		switch obj := obj.(type) {
		case *types.Func, *types.Var, *types.Const:
			report(where, obj.Type())
		case *types.TypeName:
			if a, ok := obj.Type().(*types.Alias); ok {
				if leaks(a.Rhs(), map[types.Type]bool{}) {
					out = append(out, where+" = "+types.TypeString(a.Rhs(), qualifier(pkg)))
				}
				continue
			}
			named, ok := obj.Type().(*types.Named)
			if !ok {
				continue
			}
			out = append(out, definition(pkg, where, named, rhs[obj])...)
			for m := range named.Methods() {
				if m.Exported() {
					report(where+"."+m.Name(), withoutRecv(m))
				}
			}
		}
	}
	return out
}

// definition reports what a defined type's declaration leaks: an exported field's type, an
// embedded type, an interface method's signature, or the type it is defined as (rhs, from the
// syntax).
func definition(pkg *types.Package, where string, named *types.Named, rhs types.Type) []string {
	qual := qualifier(pkg)
	var out []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		if rhs == u { // a struct literal: its fields
			for f := range u.Fields() {
				switch {
				case f.Embedded() && leaks(f.Type(), map[types.Type]bool{}):
					out = append(out, fmt.Sprintf("%s: embeds %s", where, types.TypeString(f.Type(), qual)))
				case f.Exported() && !f.Embedded() && leaks(f.Type(), map[types.Type]bool{}):
					out = append(out, fmt.Sprintf("%s.%s: %s", where, f.Name(), types.TypeString(f.Type(), qual)))
				}
			}
			return out
		}
	case *types.Interface:
		if rhs == u {
			for m := range u.ExplicitMethods() {
				if m.Exported() && leaks(m.Type(), map[types.Type]bool{}) {
					out = append(out, fmt.Sprintf("%s.%s: %s", where, m.Name(), types.TypeString(withoutRecv(m), qual)))
				}
			}
			for e := range u.EmbeddedTypes() {
				if leaks(e, map[types.Type]bool{}) {
					out = append(out, fmt.Sprintf("%s: embeds %s", where, types.TypeString(e, qual)))
				}
			}
			return out
		}
	}
	// Defined as another type ("type X plugin.Limits", whose underlying type is a struct of
	// plugin.Limits' fields, so only the declaration's right-hand side names it) or a composite.
	if rhs == nil {
		rhs = named.Underlying()
	}
	if leaks(rhs, map[types.Type]bool{}) {
		out = append(out, fmt.Sprintf("%s: defined as %s", where, types.TypeString(rhs, qual)))
	}
	return out
}

// qualifier names the types of other packages by package name, as source code does.
func qualifier(pkg *types.Package) types.Qualifier {
	return func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
}

// leaks reports whether t names a type of an internal package (the types it is built of
// included: elements, keys, parameters, results, type arguments).
func leaks(t types.Type, seen map[types.Type]bool) bool {
	if t == nil || seen[t] {
		return false
	}
	seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		if o := t.Obj(); o.Pkg() != nil && isInternal(o.Pkg().Path()) {
			return true
		}
		return leaks(types.Unalias(t), seen)
	case *types.Named:
		if o := t.Obj(); o.Pkg() != nil && isInternal(o.Pkg().Path()) {
			return true
		}
		for a := range t.TypeArgs().Types() {
			if leaks(a, seen) {
				return true
			}
		}
		return false // its own declaration is checked where it is declared
	case *types.Pointer:
		return leaks(t.Elem(), seen)
	case *types.Slice:
		return leaks(t.Elem(), seen)
	case *types.Array:
		return leaks(t.Elem(), seen)
	case *types.Chan:
		return leaks(t.Elem(), seen)
	case *types.Map:
		return leaks(t.Key(), seen) || leaks(t.Elem(), seen)
	case *types.Signature:
		return leaks(t.Params(), seen) || leaks(t.Results(), seen)
	case *types.Tuple:
		for v := range t.Variables() {
			if leaks(v.Type(), seen) {
				return true
			}
		}
	case *types.Struct:
		for f := range t.Fields() {
			if (f.Exported() || f.Embedded()) && leaks(f.Type(), seen) {
				return true
			}
		}
	case *types.Interface:
		for m := range t.ExplicitMethods() {
			if leaks(m.Type(), seen) {
				return true
			}
		}
		for e := range t.EmbeddedTypes() {
			if leaks(e, seen) {
				return true
			}
		}
	case *types.TypeParam:
		return leaks(t.Constraint(), seen)
	case *types.Union:
		for term := range t.Terms() {
			if leaks(term.Type(), seen) {
				return true
			}
		}
	}
	return false
}

// withoutRecv is a method's signature as a function's (the receiver is the declaring type).
func withoutRecv(m *types.Func) *types.Signature {
	s := m.Type().(*types.Signature)
	return types.NewSignatureType(nil, nil, nil, s.Params(), s.Results(), s.Variadic())
}
