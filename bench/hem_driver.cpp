// Runs one matcher of the public HEM code (shiwanghua/HEM: HEM5DD, Rein, Tama) on a
// workload that bench/bench_domains.py generated, so that they and psmatch's matchers are
// measured on the same subscriptions and events. Compiled by bench_domains.py against a
// checkout of that code (--hem-dir); none of HEM's code is part of this repository.
//
// Usage: hem_driver {hem5dd|rein|tama} WORKLOAD
// WORKLOAD is little-endian int32: n, k, events, attributes, domain; then the n x k
// attributes, lower bounds and upper bounds of the subscriptions' closed ranges; then the
// events x attributes values of the events (each event carries every attribute).
// Prints one JSON line last: build seconds (wall and CPU), the matcher's own memory
// estimate (calMemory, MB), peak RSS, CPU ms per event (one event at a time, as HEM
// matches) and matches per event.
#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "HEM5.h"
#include "Rein.h"
#include "Tama.h"

static double cpu_seconds() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double wall_seconds() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static bool read_ints(std::ifstream& in, std::vector<int32_t>& out, size_t count) {
    out.resize(count);
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * 4));
    return static_cast<size_t>(in.gcount()) == count * 4;
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s {hem5dd|rein|tama} WORKLOAD\n", argv[0]);
        return 2;
    }
    const std::string algorithm = argv[1];
    std::ifstream in(argv[2], std::ios::binary);
    std::vector<int32_t> header, attr, lo, hi, values;
    if (!read_ints(in, header, 5)) {
        std::fprintf(stderr, "%s: no header\n", argv[2]);
        return 2;
    }
    const int32_t n = header[0], k = header[1], events = header[2];
    if (n < 0 || n > subs || k < 0 || events < 0 || header[3] <= 0 || header[4] <= 0) {
        std::fprintf(stderr, "%s: bad header (n %d, at most %d)\n", argv[2], n, subs);
        return 2;
    }
    const size_t pairs = static_cast<size_t>(n) * k;
    if (!read_ints(in, attr, pairs) || !read_ints(in, lo, pairs) || !read_ints(in, hi, pairs) ||
        !read_ints(in, values, static_cast<size_t>(events) * header[3])) {
        std::fprintf(stderr, "%s: truncated\n", argv[2]);
        return 2;
    }
    atts = header[3];  // HEM's globals: the workload's shape
    valDom = header[4];
    cons = k;
    m = header[3];

    std::vector<IntervalSub> subList(n);
    for (int32_t i = 0; i < n; i++) {
        subList[i].id = i;
        subList[i].size = k;
        for (int32_t j = 0; j < k; j++) {
            const size_t at = static_cast<size_t>(i) * k + j;
            if (attr[at] < 0 || attr[at] >= atts || lo[at] < 0 || hi[at] >= valDom) {
                std::fprintf(stderr, "%s: predicate %zu out of range\n", argv[2], at);
                return 2;
            }
            subList[i].constraints.push_back({attr[at], lo[at], hi[at]});
        }
    }
    std::vector<Pub> pubList(events);
    for (int32_t e = 0; e < events; e++) {
        pubList[e].id = e;
        pubList[e].size = atts;
        for (int32_t a = 0; a < atts; a++)
            pubList[e].pairs.push_back({a, values[static_cast<size_t>(e) * atts + a]});
    }

    // Rein and Tama hold arrays of `subs` ints: on the heap, not the stack.
    std::unique_ptr<HEM5> hem;
    std::unique_ptr<Rein> rein;
    std::unique_ptr<Tama> tama;
    const double wall0 = wall_seconds(), cpu0 = cpu_seconds();
    if (algorithm == "hem5dd") {
        hem.reset(new HEM5(HEM5_DD));
        for (const auto& sub : subList) hem->insert(sub);
        hem->initBits();
    } else if (algorithm == "rein") {
        rein.reset(new Rein(OriginalRein));
        for (const auto& sub : subList) rein->insert_backward_original(sub);
    } else if (algorithm == "tama") {
        tama.reset(new Tama(TAMA_FORWARD));
        for (const auto& sub : subList) tama->insert(sub);
    } else {
        std::fprintf(stderr, "unknown algorithm %s\n", algorithm.c_str());
        return 2;
    }
    const double build_wall = wall_seconds() - wall0, build_cpu = cpu_seconds() - cpu0;

    long long matches = 0;
    const double match0 = cpu_seconds();
    for (const auto& pub : pubList) {
        int found = 0;
        if (hem) hem->match(pub, found);
        else if (rein) rein->match_backward_original(pub, found);
        else tama->match_accurate(pub, found, subList);
        matches += found;
    }
    const double match_cpu = cpu_seconds() - match0;
    const int memory_mb = hem ? hem->calMemory()
                          : rein ? rein->calMemory_backward_original() : tama->calMemory();
    rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    std::printf("{\"build_s\": %.6f, \"build_cpu_s\": %.6f, \"memory_mb\": %d, "
                "\"peak_rss\": %lld, \"ms_per_event\": %.6f, \"matches_per_event\": %.4f}\n",
                build_wall, build_cpu, memory_mb, static_cast<long long>(usage.ru_maxrss) * 1024,
                events ? 1e3 * match_cpu / events : 0.0,
                events ? static_cast<double>(matches) / events : 0.0);
    return 0;
}
