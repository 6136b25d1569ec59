package atomicfile

// syncDirectory does nothing: Windows cannot open a directory to flush it,
// and NTFS journals the rename itself.
func syncDirectory(dir string) error { return nil }
