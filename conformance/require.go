package conformance

import "testing"

// RequirePass fails t, printing the report, unless every check of rep passed; otherwise it logs
// the report. Plugin authors call it from a Go test of their plugin:
//
//	rep := conformance.Run(ctx, wasmbuild.MustBuild(t, "."), conformance.Options{})
//	conformance.RequirePass(t, rep)
func RequirePass(t testing.TB, rep *Report) {
	t.Helper()
	if !rep.Passed() {
		t.Fatalf("conformance failed:\n%s", rep)
	}
	t.Log(rep.String())
}

// RequireFail shows that checks can fail: each check named in fail must be in rep and have
// failed, and each named in pass must have passed. Profiles use it with the deliberately wrong
// plugin they keep in testdata (pass names what that plugin still gets right, such as loading).
func RequireFail(t testing.TB, rep *Report, pass []string, fail ...string) {
	t.Helper()
	for _, name := range fail {
		if r, ok := rep.Result(name); !ok || r.Passed {
			t.Errorf("check %q did not fail", name)
		}
	}
	for _, name := range pass {
		if r, ok := rep.Result(name); !ok || !r.Passed {
			t.Errorf("check %q should pass", name)
		}
	}
	t.Log(rep.String())
}
