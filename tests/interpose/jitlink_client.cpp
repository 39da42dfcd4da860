// A program that links device code at run time the way CUDA-Q realtime does, through nvJitLink's
// C API and nothing of cudaq-rt's: options and inputs from the command line, added in order, the
// output written to a file. The interposer's tests run it with and without
// libcudaq_rt_nvjitlink.so preloaded and compare what it prints and writes.
//
//   jitlink_client [-O OPTION]... [--data TYPE:PATH | --file TYPE:PATH]... [--ptx] [-o OUT]
//                  [--threads N] [--one-handle-threads N] [--info-log] [--misuse] [--unversioned]
//
// TYPE: any, cubin, ptx, ltoir, fatbin, object, library. --data reads the file and adds its bytes
// (nvJitLinkAddData); --file hands nvJitLink the path (nvJitLinkAddFile). --threads N makes the
// same link on N threads at once, each on its own handle, and checks that all outputs agree.
// --one-handle-threads N deals the inputs round-robin to N threads that add them to one shared
// handle at once, each its share in order, as a program that misuses one handle from several
// threads does (the order the handle sees them in then varies from run to run).
// --misuse calls the API out of order and with NULL arguments and prints every result code.
// --unversioned calls the unversioned names (nvJitLinkCreate, ...), found with dlsym, as programs
// that load nvJitLink by name do.
//
// It compiles against the nvJitLink header of any release (13.0, 13.5, 12.9): the calls go through
// the header's inline wrappers, which bind to that release's versioned names.
//
// Exit status: 0 linked, 1 a call failed (its name, result code and error log on stderr), 2 usage.
#include <nvJitLink.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct Input {
  nvJitLinkInputType type;
  std::string path;
  bool by_file = false;
  std::vector<char> bytes;
};

struct Args {
  std::vector<std::string> options;
  std::vector<Input> inputs;
  bool ptx = false;
  std::string out;
  int threads = 1;
  int one_handle_threads = 1;
  bool info_log = false;
  bool misuse = false;
  bool unversioned = false;
};

// The API as the program calls it: the header's inline wrappers (the versioned names of the
// header's release), or the unversioned names through dlsym.
struct Api {
  decltype(&nvJitLinkCreate) create = nvJitLinkCreate;
  decltype(&nvJitLinkDestroy) destroy = nvJitLinkDestroy;
  decltype(&nvJitLinkAddData) add_data = nvJitLinkAddData;
  decltype(&nvJitLinkAddFile) add_file = nvJitLinkAddFile;
  decltype(&nvJitLinkComplete) complete = nvJitLinkComplete;
  decltype(&nvJitLinkGetLinkedCubinSize) cubin_size = nvJitLinkGetLinkedCubinSize;
  decltype(&nvJitLinkGetLinkedCubin) cubin = nvJitLinkGetLinkedCubin;
  decltype(&nvJitLinkGetLinkedPtxSize) ptx_size = nvJitLinkGetLinkedPtxSize;
  decltype(&nvJitLinkGetLinkedPtx) ptx = nvJitLinkGetLinkedPtx;
  decltype(&nvJitLinkGetErrorLogSize) error_log_size = nvJitLinkGetErrorLogSize;
  decltype(&nvJitLinkGetErrorLog) error_log = nvJitLinkGetErrorLog;
  decltype(&nvJitLinkGetInfoLogSize) info_log_size = nvJitLinkGetInfoLogSize;
  decltype(&nvJitLinkGetInfoLog) info_log = nvJitLinkGetInfoLog;
};

template <class F> void find(F &f, const char *name) {
  void *p = ::dlsym(RTLD_DEFAULT, name);
  if (!p) {
    std::fprintf(stderr, "jitlink_client: %s: not found\n", name);
    std::exit(1);
  }
  f = reinterpret_cast<F>(p);
}

Api unversioned_api() {
  Api a;
  find(a.create, "nvJitLinkCreate");
  find(a.destroy, "nvJitLinkDestroy");
  find(a.add_data, "nvJitLinkAddData");
  find(a.add_file, "nvJitLinkAddFile");
  find(a.complete, "nvJitLinkComplete");
  find(a.cubin_size, "nvJitLinkGetLinkedCubinSize");
  find(a.cubin, "nvJitLinkGetLinkedCubin");
  find(a.ptx_size, "nvJitLinkGetLinkedPtxSize");
  find(a.ptx, "nvJitLinkGetLinkedPtx");
  find(a.error_log_size, "nvJitLinkGetErrorLogSize");
  find(a.error_log, "nvJitLinkGetErrorLog");
  find(a.info_log_size, "nvJitLinkGetInfoLogSize");
  find(a.info_log, "nvJitLinkGetInfoLog");
  return a;
}

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr, "jitlink_client: %s\n", why);
  std::exit(2);
}

bool parse_type(std::string_view s, nvJitLinkInputType &t) {
  static const std::pair<const char *, nvJitLinkInputType> names[] = {
      {"any", NVJITLINK_INPUT_ANY},        {"cubin", NVJITLINK_INPUT_CUBIN},
      {"ptx", NVJITLINK_INPUT_PTX},        {"ltoir", NVJITLINK_INPUT_LTOIR},
      {"fatbin", NVJITLINK_INPUT_FATBIN},  {"object", NVJITLINK_INPUT_OBJECT},
      {"library", NVJITLINK_INPUT_LIBRARY}};
  for (auto [name, type] : names)
    if (s == name) {
      t = type;
      return true;
    }
  return false;
}

Input parse_input(std::string_view spec, bool by_file) {
  size_t colon = spec.find(':');
  Input in;
  if (colon == std::string_view::npos || !parse_type(spec.substr(0, colon), in.type))
    usage("an input is TYPE:PATH");
  in.path = std::string(spec.substr(colon + 1));
  in.by_file = by_file;
  if (!by_file) {
    std::ifstream f(in.path, std::ios::binary);
    if (!f)
      usage(("cannot read " + in.path).c_str());
    in.bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  return in;
}

Args parse(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view s = argv[i];
    auto value = [&] {
      if (i + 1 >= argc)
        usage("an option lacks its value");
      return std::string_view(argv[++i]);
    };
    if (s == "-O")
      a.options.emplace_back(value());
    else if (s == "--data")
      a.inputs.push_back(parse_input(value(), false));
    else if (s == "--file")
      a.inputs.push_back(parse_input(value(), true));
    else if (s == "--ptx")
      a.ptx = true;
    else if (s == "-o")
      a.out = value();
    else if (s == "--threads")
      a.threads = std::atoi(std::string(value()).c_str());
    else if (s == "--one-handle-threads")
      a.one_handle_threads = std::atoi(std::string(value()).c_str());
    else if (s == "--info-log")
      a.info_log = true;
    else if (s == "--misuse")
      a.misuse = true;
    else if (s == "--unversioned")
      a.unversioned = true;
    else
      usage(("unknown argument " + std::string(s)).c_str());
  }
  if (a.threads < 1 || a.one_handle_threads < 1)
    usage("--threads and --one-handle-threads take a positive count");
  return a;
}

std::string log_of(const Api &api, nvJitLinkHandle h, bool info) {
  size_t n = 0;
  if ((info ? api.info_log_size : api.error_log_size)(h, &n) != NVJITLINK_SUCCESS || n == 0)
    return {};
  std::string s(n, '\0');
  if ((info ? api.info_log : api.error_log)(h, s.data()) != NVJITLINK_SUCCESS)
    return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

struct Outcome {
  std::string failed; // the call that failed, or empty
  int result = 0;
  std::string error_log, info_log;
  std::vector<char> output;
};

Outcome link_once(const Api &api, const Args &a) {
  Outcome o;
  std::vector<const char *> argv;
  for (const std::string &s : a.options)
    argv.push_back(s.c_str());
  nvJitLinkHandle h = nullptr;
  auto fail = [&](const char *call, nvJitLinkResult r) {
    o.failed = call;
    o.result = r;
    if (h) {
      o.error_log = log_of(api, h, false);
      o.info_log = log_of(api, h, true);
      api.destroy(&h);
    }
    return o;
  };
  if (nvJitLinkResult r = api.create(&h, static_cast<uint32_t>(argv.size()), argv.data()))
    return fail("nvJitLinkCreate", r);
  // With --one-handle-threads N, thread t adds inputs t, t + N, t + 2N, ... in that order and
  // stops at its first failure; the lowest thread's failure is the one reported. With 1, the
  // inputs are added in order on this thread.
  const int threads = a.one_handle_threads;
  std::vector<std::pair<const char *, nvJitLinkResult>> failed(threads); // {null, SUCCESS}
  auto add_share = [&](int t) {
    for (size_t i = t; i < a.inputs.size(); i += threads) {
      const Input &in = a.inputs[i];
      nvJitLinkResult r =
          in.by_file ? api.add_file(h, in.type, in.path.c_str())
                     : api.add_data(h, in.type, in.bytes.data(), in.bytes.size(), in.path.c_str());
      if (r) {
        failed[t] = {in.by_file ? "nvJitLinkAddFile" : "nvJitLinkAddData", r};
        return;
      }
    }
  };
  if (threads == 1) {
    add_share(0);
  } else {
    std::vector<std::thread> adders;
    for (int t = 0; t < threads; ++t)
      adders.emplace_back(add_share, t);
    for (std::thread &t : adders)
      t.join();
  }
  for (auto [call, r] : failed)
    if (call)
      return fail(call, r);
  if (nvJitLinkResult r = api.complete(h))
    return fail("nvJitLinkComplete", r);
  size_t n = 0;
  if (nvJitLinkResult r = (a.ptx ? api.ptx_size : api.cubin_size)(h, &n))
    return fail(a.ptx ? "nvJitLinkGetLinkedPtxSize" : "nvJitLinkGetLinkedCubinSize", r);
  o.output.resize(n);
  if (nvJitLinkResult r = a.ptx ? api.ptx(h, o.output.data()) : api.cubin(h, o.output.data()))
    return fail(a.ptx ? "nvJitLinkGetLinkedPtx" : "nvJitLinkGetLinkedCubin", r);
  o.info_log = log_of(api, h, true);
  api.destroy(&h);
  return o;
}

// Every misuse a caller can make, one line each: what the real library answers is the contract.
void misuse(const Api &api, const Args &a) {
  size_t n = 0;
  char buf[16];
  std::vector<const char *> argv;
  for (const std::string &s : a.options)
    argv.push_back(s.c_str());
  std::printf("create(NULL) %d\n", api.create(nullptr, 0, nullptr));
  std::printf("destroy(NULL) %d\n", api.destroy(nullptr));
  nvJitLinkHandle none = nullptr;
  std::printf("destroy(&NULL) %d\n", api.destroy(&none));
  std::printf("add_data(NULL handle) %d\n",
              api.add_data(nullptr, NVJITLINK_INPUT_ANY, buf, 1, "x"));
  std::printf("complete(NULL) %d\n", api.complete(nullptr));
  std::printf("cubin_size(NULL) %d\n", api.cubin_size(nullptr, &n));
  std::printf("error_log_size(NULL) %d\n", api.error_log_size(nullptr, &n));
  nvJitLinkHandle h = nullptr;
  std::printf("create %d\n", api.create(&h, static_cast<uint32_t>(argv.size()), argv.data()));
  std::printf("cubin_size before complete %d\n", api.cubin_size(h, &n));
  std::printf("ptx_size before complete %d\n", api.ptx_size(h, &n));
  std::printf("add_data(NULL data) %d\n", api.add_data(h, NVJITLINK_INPUT_FATBIN, nullptr, 8, "x"));
  std::printf("add_data(size 0) %d\n", api.add_data(h, NVJITLINK_INPUT_FATBIN, buf, 0, "x"));
  std::printf("add_file(NULL) %d\n", api.add_file(h, NVJITLINK_INPUT_FATBIN, nullptr));
  std::printf("add_file(missing) %d\n",
              api.add_file(h, NVJITLINK_INPUT_FATBIN, "/nonexistent/jitlink_client.fatbin"));
  for (const Input &in : a.inputs)
    if (!in.by_file)
      api.add_data(h, in.type, in.bytes.data(), in.bytes.size(), in.path.c_str());
  nvJitLinkResult r = api.complete(h);
  std::printf("complete %d\n", r);
  std::printf("cubin_size(NULL size) %d\n", api.cubin_size(h, nullptr));
  std::printf("cubin(NULL) %d\n", api.cubin(h, nullptr));
  std::printf("ptx_size %d\n", api.ptx_size(h, &n));
  n = 0;
  r = api.cubin_size(h, &n);
  std::printf("cubin_size %d %s\n", r, n ? "nonzero" : "zero");
  std::printf("info_log_size(NULL size) %d\n", api.info_log_size(h, nullptr));
  std::printf("add_data after complete %d\n",
              a.inputs.empty() || a.inputs[0].by_file
                  ? -1
                  : api.add_data(h, a.inputs[0].type, a.inputs[0].bytes.data(),
                                 a.inputs[0].bytes.size(), "again"));
  std::printf("complete again %d\n", api.complete(h));
  std::printf("destroy %d\n", api.destroy(&h));
  std::printf("handle after destroy %s\n", h ? "kept" : "NULL");
}

} // namespace

int main(int argc, char **argv) {
  Args a = parse(argc, argv);
  Api api = a.unversioned ? unversioned_api() : Api{};
  if (a.misuse) {
    misuse(api, a);
    return 0;
  }
  std::vector<Outcome> outcomes(a.threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; ++t)
    threads.emplace_back([&, t] { outcomes[t] = link_once(api, a); });
  for (std::thread &t : threads)
    t.join();
  const Outcome &o = outcomes[0];
  for (const Outcome &other : outcomes)
    if (other.failed != o.failed || other.result != o.result || other.output != o.output) {
      std::fprintf(stderr, "jitlink_client: the %d links did not agree\n", a.threads);
      return 1;
    }
  if (!o.failed.empty()) {
    std::fprintf(stderr, "jitlink_client: %s: result %d\nerror log:\n%s\ninfo log:\n%s\n",
                 o.failed.c_str(), o.result, o.error_log.c_str(), o.info_log.c_str());
    return 1;
  }
  if (a.info_log)
    std::printf("info log:\n%s\n", o.info_log.c_str());
  if (!a.out.empty()) {
    std::ofstream f(a.out, std::ios::binary);
    f.write(o.output.data(), static_cast<std::streamsize>(o.output.size()));
    if (!f) {
      std::fprintf(stderr, "jitlink_client: cannot write %s\n", a.out.c_str());
      return 1;
    }
  }
  std::printf("linked %zu bytes\n", o.output.size());
  return 0;
}
