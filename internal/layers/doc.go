// Package layers holds no code: its test checks which internal packages
// may depend on which, so that the seams other implementations fill (the
// store, the backend contract, the controller runtime) stay seams.
package layers
