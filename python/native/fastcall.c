/* cudaq_rt._fastcall: one Server.call as one C function, for the Python package
 * (python/cudaq_rt/server.py). Through ctypes a call costs a foreign call's conversions and
 * several Python-level steps around it (1.2 us on one machine, 2.9 on another, against 0.14 to
 * 0.3 us for cudaq_rt_call itself); here the lock, the argument's buffer, the call with the GIL
 * released and the result's bytes are one C function.
 *
 * It links nothing: it calls cudaq_rt_call through the address the package's ctypes library gives
 * it, so that the one libcudaq_rt.so.0 the package loaded serves both paths. Built against the
 * stable ABI of Python 3.11 (the buffer protocol joined it there): one file for 3.11 and later.
 * Where it is missing or does not load, the package calls through ctypes, with the same results.
 *
 *   Caller(call_address, server_address, lock, capacity, ids, general)
 *     call(handler, arg, timeout)           -> result bytes, (rc, status, result bytes) or None
 *     call_into(handler, arg, out, timeout) -> result length, (rc, status, length) or None
 *     detach()                                 the server is gone: every call returns None
 *     server_call(handler, arg=b"", *, result=None, out=None, timeout=1.0)
 *       Server.call whole (python/cudaq_rt/server.py), for a running server to put in place of
 *       its method: the result bytes or length where call or call_into gives them; anything else
 *       (`result` given, a failure's tuple, None) goes to `general`, a Caller's last argument:
 *       general(handler, arg, result, out, timeout, answer), which raises or calls the general
 *       way (answer None). It must not hold the server (the server holds this Caller).
 * `handler` is a function_id (an int of 32 bits) or a name that `ids` (the server's dict of the
 * names it resolved, name -> function_id; read at every call) holds. The result alone when
 * cudaq_rt_call returned CUDAQ_RT_OK and the handler status 0; else a tuple of its return code
 * (the message is the C API's last error, on this thread), the status and the result. None: not
 * done here (a detached Caller, a name not in `ids` yet, a number over 32 bits, an argument that
 * is not one contiguous buffer, a length over 32 bits); the caller takes its general path, which
 * resolves the name or says what is wrong. */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cudaq_rt/cudaq_rt.h"

#include <stdint.h>
#include <stdlib.h>

typedef int (*call_fn)(cudaq_rt_server *, uint32_t, const void *, uint32_t, void *, uint32_t,
                       uint32_t *, int32_t *, double);
_Static_assert(__builtin_types_compatible_p(call_fn, __typeof__(&cudaq_rt_call)),
               "call_fn is cudaq_rt_call's type");

typedef struct {
  PyObject_HEAD call_fn call;
  cudaq_rt_server *server;     /* NULL once detached */
  PyObject *acquire, *release; /* the server's lock's bound methods */
  PyObject *ids;               /* the server's resolved names: str -> function_id */
  PyObject *general;           /* server_call's way out (above) */
  unsigned char *result;       /* call's result buffer, under the lock */
  uint32_t capacity;
} Caller;

static int caller_init(PyObject *self_, PyObject *args, PyObject *kwargs) {
  Caller *self = (Caller *)self_;
  unsigned long long call = 0, server = 0;
  PyObject *lock = NULL, *ids = NULL, *general = NULL;
  unsigned int capacity = 0;
  static char *keywords[] = {"call_address", "server_address", "lock", "capacity",
                             "ids",          "general",        NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKOIO!O", keywords, &call, &server, &lock,
                                   &capacity, &PyDict_Type, &ids, &general))
    return -1;
  if (!PyCallable_Check(general)) {
    PyErr_SetString(PyExc_TypeError, "Caller: general is not callable");
    return -1;
  }
  if (!call || !server) {
    PyErr_SetString(PyExc_ValueError, "Caller: a NULL function or server address");
    return -1;
  }
  if (self->acquire) { /* __init__ once only: the lock and the buffer are fixed */
    PyErr_SetString(PyExc_TypeError, "Caller: already initialised");
    return -1;
  }
  PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
  PyObject *release = acquire ? PyObject_GetAttrString(lock, "release") : NULL;
  unsigned char *result = release ? malloc(capacity ? capacity : 1) : NULL;
  if (!result) {
    Py_XDECREF(acquire);
    Py_XDECREF(release);
    if (!PyErr_Occurred())
      PyErr_NoMemory();
    return -1;
  }
  self->call = (call_fn)(uintptr_t)call;
  self->server = (cudaq_rt_server *)(uintptr_t)server;
  self->acquire = acquire;
  self->release = release;
  self->ids = Py_NewRef(ids);
  self->general = Py_NewRef(general);
  self->result = result;
  self->capacity = capacity;
  return 0;
}

static void caller_dealloc(PyObject *self_) {
  Caller *self = (Caller *)self_;
  Py_XDECREF(self->acquire);
  Py_XDECREF(self->release);
  Py_XDECREF(self->ids);
  Py_XDECREF(self->general);
  free(self->result);
  PyTypeObject *type = Py_TYPE(self_);
  freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
  tp_free(self_);
  Py_DECREF(type);
}

/* The lock's acquire() or release(); 0 on success. */
static int lock_step(PyObject *method) {
  PyObject *r = PyObject_CallNoArgs(method);
  if (!r)
    return -1;
  Py_DECREF(r);
  return 0;
}

/* `obj` as one contiguous buffer (writable when asked) of at most 2^32 - 1 bytes: 1 when it is
 * one, 0 when it is not, with no exception set (the general path says why). */
static int take_buffer(PyObject *obj, Py_buffer *view, int writable) {
  if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    return 0;
  }
  if ((unsigned long long)view->len > UINT32_MAX) {
    PyBuffer_Release(view);
    return 0;
  }
  return 1;
}

/* The function_id `handler` stands for: 1 with it in `fid`; 0 where the general path decides (a
 * name not resolved yet, anything else that is not an int of 32 bits; no exception set), or on
 * an error (exception set). */
static int function_id(Caller *self, PyObject *handler, uint32_t *fid) {
  if (PyUnicode_CheckExact(handler)) {
    handler = PyDict_GetItemWithError(self->ids, handler); /* borrowed */
    if (!handler)
      return 0;
  }
  if (!PyLong_Check(handler))
    return 0;
  const unsigned long value = PyLong_AsUnsignedLong(handler);
  if (value == (unsigned long)-1 && PyErr_Occurred()) {
    PyErr_Clear(); /* negative or too large: the general path says so */
    return 0;
  }
  if (value > UINT32_MAX)
    return 0;
  *fid = (uint32_t)value;
  return 1;
}

/* A timeout argument as seconds: 1, or 0 with an exception set. */
static int seconds(PyObject *timeout, double *out) {
  *out = PyFloat_AsDouble(timeout);
  return !(*out == -1.0 && PyErr_Occurred());
}

/* One cudaq_rt_call under the server's lock with the GIL released, into `out` (the caller's
 * buffer) or the Caller's own. Returns what call and call_into do (above), NULL on an error. */
static PyObject *call_locked(Caller *self, PyObject *handler, PyObject *arg_obj, PyObject *out,
                             double timeout) {
  uint32_t fid;
  if (!function_id(self, handler, &fid))
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
  Py_buffer arg, into;
  if (!take_buffer(arg_obj, &arg, 0))
    return Py_NewRef(Py_None);
  if (out && !take_buffer(out, &into, 1)) {
    PyBuffer_Release(&arg);
    return Py_NewRef(Py_None);
  }
  PyObject *answer = NULL;
  if (lock_step(self->acquire) != 0)
    goto done;
  if (!self->server) {
    answer = Py_NewRef(Py_None);
  } else {
    unsigned char *dst = out ? into.buf : self->result;
    const uint32_t capacity = out ? (uint32_t)into.len : self->capacity;
    uint32_t len = 0;
    int32_t status = 0;
    PyThreadState *released = PyEval_SaveThread();
    const int rc = self->call(self->server, fid, arg.buf, (uint32_t)arg.len, dst, capacity, &len,
                              &status, timeout);
    PyEval_RestoreThread(released);
    if (rc != CUDAQ_RT_OK)
      len = 0;
    if (rc == CUDAQ_RT_OK && status == 0) /* the common case: no tuple to build and unpack */
      answer = out ? PyLong_FromUnsignedLong(len)
                   : PyBytes_FromStringAndSize((const char *)dst, (Py_ssize_t)len);
    else
      answer = out ? Py_BuildValue("(iiI)", rc, (int)status, (unsigned int)len)
                   : Py_BuildValue("(iiy#)", rc, (int)status, (const char *)dst, (Py_ssize_t)len);
  }
  if (lock_step(self->release) != 0)
    Py_CLEAR(answer);
done:
  if (out)
    PyBuffer_Release(&into);
  PyBuffer_Release(&arg);
  return answer;
}

static PyObject *caller_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "call(handler, arg, timeout)");
    return NULL;
  }
  double timeout;
  return seconds(args[2], &timeout) ? call_locked((Caller *)self, args[0], args[1], NULL, timeout)
                                    : NULL;
}

static PyObject *caller_call_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "call_into(handler, arg, out, timeout)");
    return NULL;
  }
  double timeout;
  return seconds(args[3], &timeout)
             ? call_locked((Caller *)self, args[0], args[1], args[2], timeout)
             : NULL;
}

/* Server.call(handler, arg=b"", *, result=None, out=None, timeout=1.0): see the top. */
static PyObject *caller_server_call(PyObject *self_, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
  Caller *self = (Caller *)self_;
  enum { HANDLER, ARG, RESULT, OUT, TIMEOUT, PARAMS };
  static const char *const names[PARAMS] = {"handler", "arg", "result", "out", "timeout"};
  PyObject *given[PARAMS] = {NULL, NULL, NULL, NULL, NULL};
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError,
                 "Server.call() takes 2 positional arguments (handler, arg) but %zd were given",
                 nargs);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i)
    given[i] = args[i];
  const Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject *name = PyTuple_GetItem(kwnames, k); /* borrowed */
    int i = 0;
    while (i < PARAMS && PyUnicode_CompareWithASCIIString(name, names[i]) != 0)
      ++i;
    if (i == PARAMS || given[i]) {
      PyErr_Format(PyExc_TypeError,
                   i == PARAMS ? "Server.call() got an unexpected keyword argument '%U'"
                               : "Server.call() got multiple values for argument '%U'",
                   name);
      return NULL;
    }
    given[i] = args[nargs + k];
  }
  if (!given[HANDLER]) {
    PyErr_SetString(PyExc_TypeError,
                    "Server.call() missing 1 required positional argument: 'handler'");
    return NULL;
  }
  double timeout = 1.0; /* the default; its object is made only for `general` */
  if (given[TIMEOUT] && !seconds(given[TIMEOUT], &timeout))
    return NULL;
  PyObject *made_arg = NULL, *made_timeout = NULL, *answer = NULL, *out = NULL;
  if (!given[ARG] && !(given[ARG] = made_arg = PyBytes_FromStringAndSize(NULL, 0)))
    return NULL;
  for (int i = RESULT; i <= OUT; ++i)
    if (!given[i])
      given[i] = Py_None;
  if (given[RESULT] != Py_None) {
    answer = Py_NewRef(Py_None);
  } else {
    const int into = given[OUT] != Py_None;
    answer = call_locked(self, given[HANDLER], given[ARG], into ? given[OUT] : NULL, timeout);
    if (answer && (into ? PyLong_CheckExact(answer) : PyBytes_CheckExact(answer))) { /* status 0 */
      Py_XDECREF(made_arg);
      return answer;
    }
  }
  if (answer && (given[TIMEOUT] || (given[TIMEOUT] = made_timeout = PyFloat_FromDouble(1.0))))
    out = PyObject_CallFunctionObjArgs(self->general, given[HANDLER], given[ARG], given[RESULT],
                                       given[OUT], given[TIMEOUT], answer, NULL);
  Py_XDECREF(answer);
  Py_XDECREF(made_timeout);
  Py_XDECREF(made_arg);
  return out;
}

static PyObject *caller_detach(PyObject *self, PyObject *unused) {
  (void)unused;
  ((Caller *)self)->server = NULL;
  Py_RETURN_NONE;
}

static PyMethodDef caller_methods[] = {
    {"call", (PyCFunction)(void (*)(void))caller_call, METH_FASTCALL,
     "call(handler, arg, timeout) -> result, (rc, status, result) or None"},
    {"call_into", (PyCFunction)(void (*)(void))caller_call_into, METH_FASTCALL,
     "call_into(handler, arg, out, timeout) -> length, (rc, status, length) or None"},
    {"detach", caller_detach, METH_NOARGS, "the server is gone: every call returns None"},
    {"server_call", (PyCFunction)(void (*)(void))caller_server_call, METH_FASTCALL | METH_KEYWORDS,
     "server_call($self, handler, arg=b'', *, result=None, out=None, timeout=1.0)\n--\n\n"
     "Server.call, in C while the server runs: see help(cudaq_rt.Server.call)."},
    {NULL, NULL, 0, NULL}};

static PyType_Slot caller_slots[] = {
    {Py_tp_init, (void *)caller_init},
    {Py_tp_dealloc, (void *)caller_dealloc},
    {Py_tp_methods, caller_methods},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_doc, "cudaq_rt_call for one server, under its lock (cudaq_rt/server.py)"},
    {0, NULL}};

static PyType_Spec caller_spec = {"cudaq_rt._fastcall.Caller", sizeof(Caller), 0,
                                  Py_TPFLAGS_DEFAULT, caller_slots};

static int module_exec(PyObject *module) {
  PyObject *type = PyType_FromSpec(&caller_spec);
  if (!type)
    return -1;
  if (PyModule_AddObjectRef(module, "Caller", type) != 0) {
    Py_DECREF(type);
    return -1;
  }
  Py_DECREF(type);
  return 0;
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, (void *)module_exec}, {0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT,
                                        "cudaq_rt._fastcall",
                                        "cudaq_rt_call as one C function (cudaq_rt/server.py)",
                                        0,
                                        NULL,
                                        module_slots,
                                        NULL,
                                        NULL,
                                        NULL};

PyMODINIT_FUNC PyInit__fastcall(void) {
  return PyModuleDef_Init(&module_def);
}
