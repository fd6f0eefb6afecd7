package processor

// Notification is one event for a listener: an AddNotification, an
// UpdateNotification or a DeleteNotification, passed by value. The set is
// closed; other types cannot be distributed.
type Notification interface {
	isNotification()
}

// AddNotification is delivered as handler.OnAdd(Obj, InInitialList).
// InInitialList marks objects of the informer's initial state; a listener is
// not synced until it has handled every such notification queued to it.
type AddNotification struct {
	Obj           interface{}
	InInitialList bool
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

func (AddNotification) isNotification()    {}
func (UpdateNotification) isNotification() {}
func (DeleteNotification) isNotification() {}
