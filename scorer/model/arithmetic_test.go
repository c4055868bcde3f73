package model

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
)

// arithmeticDigests are the digests arithmeticDigest gave, by arithmeticKey: the bits each
// implementation gives under kernels.ArithmeticVersion. Entries of an older version are dropped
// when the version changes; an implementation this project's machines have not run yet (AVX-512,
// AMX) has no entry until a session on such a machine records it from the test's log. The
// pure-Go and AVX2 entries of the current version must be there.
var arithmeticDigests = map[string]string{
	"2026-11-28/amd64/generic/auto":    "362b63190ebf2ed0d5d17116aedc5991",
	"2026-11-28/amd64/avx2/auto":       "972e515465b66c80e5b5fe4bfa0fe8e8",
	"2026-11-28/amd64/avx512/auto":     "13ce5aa4f62e76f71b1e34832e9d26bd", // recorded on an Intel Xeon with AMX (the device host)
	"2026-11-28/amd64/avx512-amx/auto": "6cb412e1f1709efc8c19439b7907c635",
}

// arithmeticKey names what the bits depend on besides the inputs: the arithmetic version, the
// architecture and its Go level (GOAMD64=v3 lets the compiler fuse the pure-Go kernels'
// multiply-adds), the kernels' implementation and the bf16 matmul mode.
func arithmeticKey() string {
	key := kernels.ArithmeticVersion + "/" + runtime.GOARCH
	if l := goLevel(); l != "" {
		key += "-" + l
	}
	return key + "/" + kernels.Implementation() + "/" + kernels.BF16MatmulMode()
}

// goLevel is the build's Go instruction level (GOAMD64 and the like) when it is not the
// default.
func goLevel() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GO"+strings.ToUpper(runtime.GOARCH) && s.Value != "" && s.Value != "v1" {
				return s.Value
			}
		}
	}
	return ""
}

// arithmeticDigest generates the tiny models of every architecture in f32 and bf16 (the
// generator's calibration runs the kernels too), scores fixed documents in one batch on one
// thread and hashes every logit's bits.
func arithmeticDigest(t *testing.T) string {
	defer kernels.SetThreads(kernels.Threads())
	kernels.SetThreads(1)
	h := sha256.New()
	for _, arch := range tinyArchs {
		for _, dtype := range []string{"f32", "bf16"} {
			spec := GenSpec{Arch: arch, Preset: "tiny", Seed: 7, DType: dtype}
			e := load(t, generated(t, spec), Options{})
			g, err := e.Tokenize("Find passages that answer the query", "cheap espresso at home", pathDocs(), scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(h, "%s/%s:", arch, dtype)
			for _, l := range g.Logits {
				h.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(l)))
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// arithmeticLevels are the KERNELS_ISA values to run the digest under: every level this CPU has,
// the CPU's own ("") only where it may be above them all (AMX). The pure-Go level is left to
// the purego build (`make test-purego` runs this test there): under the race detector the
// pure-Go kernels take minutes.
func arithmeticLevels() []string {
	if puregoBuild {
		return []string{""}
	}
	var l []string
	if !raceBuild {
		l = append(l, "generic")
	}
	x := cpu.X86
	if x.HasAVX2 && x.HasFMA {
		l = append(l, "avx2")
	}
	if x.HasAVX512F {
		l = append(l, "avx512")
	}
	if x.HasAVX512F && x.HasAVX512BF16 {
		l = append(l, "avx512bf16")
	}
	if x.HasAMXTile || len(l) == 0 {
		l = append(l, "")
	}
	return l
}

const arithmeticChildEnv = "RELEVANCE_ARITHMETIC_DIGEST_CHILD"

// TestArithmeticVersionNamesTheBits pins kernels.ArithmeticVersion to the bits it names: the
// model fingerprint carries the version and not the bits, so a change that moves any logit's
// bits under an unchanged version would let the proxy's score cache mix two builds' scores.
// The test runs itself once per instruction-set level this CPU has (KERNELS_ISA, each in a
// child process, since the level is chosen at start-up) and compares each digest with the one
// recorded for its version and implementation. A mismatch means: bump kernels.ArithmeticVersion
// and record the new digests (the log prints them); a level with none recorded is logged.
func TestArithmeticVersionNamesTheBits(t *testing.T) {
	if os.Getenv(arithmeticChildEnv) != "" {
		fmt.Printf("arithmetic-digest %s %s\n", arithmeticKey(), arithmeticDigest(t))
		return
	}
	if testing.Short() {
		t.Skip("runs the tiny models once per instruction-set level")
	}
	seen := map[string]string{}
	for _, isa := range arithmeticLevels() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestArithmeticVersionNamesTheBits$", "-test.count=1")
		cmd.Env = append(os.Environ(), arithmeticChildEnv+"=1", "KERNELS_ISA="+isa)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("KERNELS_ISA=%q: %v\n%s", isa, err, out)
		}
		key, digest, ok := "", "", false
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "arithmetic-digest" {
				key, digest, ok = f[1], f[2], true
			}
		}
		if !ok {
			t.Fatalf("KERNELS_ISA=%q: no digest in the child's output:\n%s", isa, out)
		}
		if prev, dup := seen[key]; dup {
			// A level above the CPU's runs the CPU's own: the same implementation again.
			if prev != digest {
				t.Errorf("%s: two runs gave %s and %s: the bits are not deterministic", key, prev, digest)
			}
			continue
		}
		seen[key] = digest
		want, recorded := arithmeticDigests[key]
		switch {
		case !recorded && goLevel() == "" && (strings.Contains(key, "/generic/") || strings.Contains(key, "/avx2/")):
			// Every amd64 machine runs these two at the project's default Go level: a version
			// without them pins nothing.
			t.Errorf("%s: digest %s, none recorded: record it in arithmeticDigests", key, digest)
		case !recorded:
			t.Logf("%s: digest %s, none recorded (add it to arithmeticDigests)", key, digest)
		case want != digest:
			t.Errorf("%s: the logits' bits changed (digest %s, recorded %s) under an unchanged kernels.ArithmeticVersion: bump it and record the new digests", key, digest, want)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no implementation ran")
	}
}
