package cost

import "strings"

// Operation is the kind of request, as far as the cost model cares.
type Operation uint8

// The operations. The first six are HTTP methods; the others are S3 operations recognised by
// `operations s3`. OpOther is any other method.
const (
	OpGet Operation = iota
	OpHead
	OpPut
	OpPost
	OpPatch
	OpDelete
	OpList
	OpCopy
	OpMultipartInit
	OpMultipartUpload
	OpMultipartComplete
	OpMultipartAbort
	OpDeleteObjects // S3 DeleteObjects (POST ?delete): its base is charged per object named
	OpOther

	// NumOperations is the number of operations, for arrays indexed by Operation.
	NumOperations = int(OpOther) + 1
)

var opNames = [NumOperations]string{
	OpGet:               "GET",
	OpHead:              "HEAD",
	OpPut:               "PUT",
	OpPost:              "POST",
	OpPatch:             "PATCH",
	OpDelete:            "DELETE",
	OpList:              "LIST",
	OpCopy:              "COPY",
	OpMultipartInit:     "MULTIPART_INIT",
	OpMultipartUpload:   "MULTIPART_UPLOAD",
	OpMultipartComplete: "MULTIPART_COMPLETE",
	OpMultipartAbort:    "MULTIPART_ABORT",
	OpDeleteObjects:     "DELETE_OBJECTS",
	OpOther:             "OTHER",
}

// defaultBase is the base cost of each operation; OpOther takes Config.Default instead.
var defaultBase = [NumOperations]int64{
	OpGet:               1,
	OpHead:              1,
	OpPut:               5,
	OpPost:              5,
	OpPatch:             3,
	OpDelete:            2,
	OpList:              3,
	OpCopy:              6,
	OpMultipartInit:     2,
	OpMultipartUpload:   4,
	OpMultipartComplete: 8,
	OpMultipartAbort:    3,
	OpDeleteObjects:     2, // per object, as DELETE
}

// String returns the operation's name: "GET", "MULTIPART_INIT", … (used as a metric label).
func (o Operation) String() string {
	if int(o) < NumOperations {
		return opNames[o]
	}
	return "OTHER"
}

// ParseOperation returns the operation with the given name, ignoring case.
func ParseOperation(s string) (Operation, bool) {
	for i, name := range opNames {
		if strings.EqualFold(s, name) {
			return Operation(i), true
		}
	}
	return OpOther, false
}

// methodOp maps an HTTP method to its operation. Methods are case-sensitive in HTTP, but a
// lowercase "put" must not be a way to pay the price of an unknown method, so case is ignored
// (EqualFold does not allocate). An empty method means GET, as in net/http.
func methodOp(m string) Operation {
	switch m {
	case "GET", "":
		return OpGet
	case "HEAD":
		return OpHead
	case "PUT":
		return OpPut
	case "POST":
		return OpPost
	case "PATCH":
		return OpPatch
	case "DELETE":
		return OpDelete
	}
	for op := OpGet; op <= OpDelete; op++ {
		if strings.EqualFold(m, opNames[op]) {
			return op
		}
	}
	return OpOther
}
