// Package realtest runs the proxy core against real scorer nodes (scorer/node with the real
// engine on a generated tiny model) over loopback. It holds only tests; it is a package of its
// own so that the proxy's unit tests do not depend on the model code.
package realtest
