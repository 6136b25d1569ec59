package kube

// SetEventQueue sets how many Events may wait to be written, for the test
// that fills the queue; the returned func puts the bound back.
func SetEventQueue(n int) (restore func()) {
	old := eventQueue
	eventQueue = n
	return func() { eventQueue = old }
}
