package processor

// Notification is one event for a listener: an AddNotification, an
// UpdateNotification, a DeleteNotification or a ProgressNotification,
// passed by value. The set is closed; other types cannot be distributed.
type Notification interface {
	isNotification()
}

// AddNotification is delivered as handler.OnAdd(Obj, InInitialList).
// InInitialList marks objects of the informer's initial state; a listener is
// not synced until it has handled every such notification queued to it.
type AddNotification struct {
	Obj           interface{}
	InInitialList bool
	// late marks an initial add the listener does not count for HasSynced
	// (Listener.AddLate).
	late bool
}

// UpdateNotification is delivered as handler.OnUpdate(Old, New).
type UpdateNotification struct {
	Old, New interface{}
}

// DeleteNotification is delivered as handler.OnDelete(Old). Old may be a
// cache.DeletedFinalStateUnknown.
type DeleteNotification struct {
	Old interface{}
}

// ProgressNotification calls no handler: once a listener reaches it, the
// handler has returned from every notification queued before it, and
// Listener.Delivered returns At (the informer's resourceVersion when it
// was distributed).
type ProgressNotification struct {
	At string
}

func (AddNotification) isNotification()      {}
func (ProgressNotification) isNotification() {}
func (UpdateNotification) isNotification()   {}
func (DeleteNotification) isNotification()   {}
