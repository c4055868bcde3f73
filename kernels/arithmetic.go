package kernels

// ArithmeticVersion names the bits the kernels give. Two builds with the same version give the
// same output bits for the same inputs on the same implementation (Implementation(), the bf16
// matmul mode) and Go instruction level (GOAMD64=v3 lets the compiler fuse the pure-Go code's
// multiply-adds; the project builds at the default, v1); a change that alters any kernel's output bits on any implementation — another
// summation order, another exp approximation, f32 where f64 was, a new tile that sums
// differently — must change it.
//
// Like the implementation, the Go level is left out of the fingerprint: they move bits in f32
// rounding only, and a fleet of mixed CPUs would otherwise be split into models.
//
// It is part of a scorer's model fingerprint (scorer/model.Fingerprint), which keys the proxy's
// score cache and the proxy's one-model-per-request rule. Without it, nodes upgraded to a build
// whose arithmetic moved a logit by 1e-4 kept their fingerprint: the proxy's cache went on
// serving the old build's scores beside the new build's, and a rolling upgrade could answer one
// request with scores of both. With it, such an upgrade is a model change: the cache starts
// over, and a request is pinned to one build's nodes.
//
// scorer/model's TestArithmeticVersionNamesTheBits records a digest of tiny models' logits for
// each version and implementation it has run on, and fails when the bits move under an
// unchanged version.
const ArithmeticVersion = "2026-11-28"
