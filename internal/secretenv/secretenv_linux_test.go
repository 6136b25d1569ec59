package secretenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// helperEnv makes the test binary, run again by TestTakeClearsProcEnviron,
// act as a server given a secret in its environment.
const helperEnv = "SECRETENV_TEST_HELPER"

const secret = "s3cret-4f1d9c"

// TestTakeClearsProcEnviron starts this test binary again with the secret
// in HVKUBE_TOKEN. There Take returns it; after that neither the process's
// own /proc/self/environ nor a child reading /proc/PPID/environ sees it,
// and Go's environment does not have it.
func TestTakeClearsProcEnviron(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("the helper runs in TestTakeHelper")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTakeHelper$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "HVKUBE_TOKEN="+secret, "OTHER=kept")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "helper checked") {
		t.Fatalf("the helper did not run its checks:\n%s", out)
	}
}

// TestTakeHelper is the process TestTakeClearsProcEnviron starts.
func TestTakeHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestTakeClearsProcEnviron")
	}
	before, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(before, []byte("HVKUBE_TOKEN="+secret)) {
		t.Fatalf("the helper's /proc/self/environ lacks the secret before Take: the test proves nothing")
	}
	got, err := Take("HVKUBE_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if got != secret {
		t.Errorf("Take = %q, want %q", got, secret)
	}
	if v, ok := os.LookupEnv("HVKUBE_TOKEN"); ok {
		t.Errorf("Go's environment still has HVKUBE_TOKEN=%q", v)
	}
	if os.Getenv("OTHER") != "kept" {
		t.Errorf("OTHER = %q, want it kept", os.Getenv("OTHER"))
	}
	self, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		t.Fatal(err)
	}
	// A child that reads its parent's initial environment, as a host
	// command of the server could try.
	child := exec.Command("cat", "/proc/"+strconv.Itoa(os.Getpid())+"/environ")
	fromChild, err := child.Output()
	if err != nil {
		t.Fatalf("cat /proc/PPID/environ: %v", err)
	}
	for what, b := range map[string][]byte{"/proc/self/environ": self, "a child's /proc/PPID/environ": fromChild} {
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte("HVKUBE_TOKEN")) {
			t.Errorf("%s still shows the token", what)
		}
		if !bytes.Contains(b, []byte("OTHER=kept")) {
			t.Errorf("%s lost the other variables", what)
		}
	}
	fmt.Println("helper checked")
}

// TestTakeUnset: a variable that is not set is no error, and gives "".
func TestTakeUnset(t *testing.T) {
	os.Unsetenv("SECRETENV_TEST_UNSET")
	got, err := Take("SECRETENV_TEST_UNSET")
	if err != nil || got != "" {
		t.Fatalf("Take = %q, %v; want \"\", nil", got, err)
	}
}
