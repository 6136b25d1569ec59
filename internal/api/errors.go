package api

import (
	"errors"
	"fmt"
)

// Error categories. Every error that reaches the API wraps one of these; the
// server maps them to HTTP status codes in one place.
var (
	ErrInvalid       = errors.New("invalid")
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrConflict      = errors.New("conflict")
	ErrUnsupported   = errors.New("not supported")
	ErrUnavailable   = errors.New("unavailable")
	// ErrGone: what was asked for is no longer there to give, such as the
	// changes after a resourceVersion the store no longer remembers.
	ErrGone = errors.New("gone")
	// ErrNoSpace: the disk holding the store is full.
	ErrNoSpace = errors.New("no space left")
)

// FieldError is a validation error that names the offending field path, such
// as spec.display.resolution.
//
// +kubebuilder:object:generate=false
type FieldError struct {
	Field  string
	Detail string
	// Category is the error category (ErrInvalid when nil): ErrConflict
	// for a field whose value is fine but may not change now.
	Category error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Detail
	}
	return e.Field + ": " + e.Detail
}

// Unwrap makes a FieldError an ErrInvalid, or its Category.
func (e *FieldError) Unwrap() error {
	if e.Category != nil {
		return e.Category
	}
	return ErrInvalid
}

// Conflict returns a FieldError of category ErrConflict for field: a
// change the object's state does not allow now.
func Conflict(field, format string, args ...any) error {
	return &FieldError{Field: field, Detail: fmt.Sprintf(format, args...), Category: ErrConflict}
}

// Invalid returns a FieldError for field.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)}
}

// FieldOf returns the field named by err, if it is or wraps a FieldError.
func FieldOf(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}
