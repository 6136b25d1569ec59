package guest

// NewLinux is the Linux guest (images/linux-desktop). Work in progress.
func NewLinux(helpers map[string]string) OS { return nil }
