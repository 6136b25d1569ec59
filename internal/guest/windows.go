package guest

// WindowsOS is the Windows guest. Work in progress.
type WindowsOS struct{ OS }
