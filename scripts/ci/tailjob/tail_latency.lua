-- tail_latency.lua: wrk's done() hook for the tail-latency job.
--
-- Role: after a wrk run, print the latency spectrum wrk measured and one
-- machine-readable line for scripts/ci/tail_latency.py (with wrk's whole
-- histogram as [us,count] buckets, so the job can pool runs):
--
--   TAILREACTOR_METRICS {"requests":...,"percentiles":[{"p":50,"us":...,"samples":...},...],...}
--
-- Usage: TAILREACTOR_PERCENTILES=50,99,99.9 wrk -t2 -c64 -d3s -s scripts/ci/tailjob/tail_latency.lua http://127.0.0.1:3000/
--
-- The percentiles printed come from TAILREACTOR_PERCENTILES (comma-separated); the job sets it from
-- its metric table (scripts/ci/tailjob/metrics.py, tailjob.wrk.wrk_env).
--
-- What the numbers are: wrk's own latency histogram (one bucket per
-- microsecond, up to --timeout).  wrk is closed-loop, so a stalled server
-- receives fewer requests and the tail is under-reported (coordinated
-- omission).  wrk 4 partly corrects for that before done() runs
-- (stats_correct): for every latency above twice the mean per-connection
-- request interval it adds synthetic samples, so `latency_samples` is usually
-- larger than `requests`.  Latencies at or above --timeout are not in the
-- histogram; they are counted in errors.timeout.
--
-- Formatting: every latency is kept as an integer number of microseconds in
-- the JSON line and printed with three decimals in ms in the text.  CWIST's
-- copy once printed P99.999 = 0.00 because of a format/path bug; here nothing
-- is rounded before it is printed, and an empty histogram (no responses at
-- all) prints 0 with 0 samples instead of wrk's UINT64_MAX minimum.

-- Request: the URL's path as is when it is "/" (wrk's own static request, no Lua per
-- request).  A path ending in "/" other than that, such as "/user/", is a prefix:
-- every request is GET <prefix><seq>, a count per thread, which is what the job's load
-- client sends (the bench server's /user/:id), so the capacity run of `--rate 0.7x`
-- measures the request the load is made of.  wrk sets wrk.path from the URL before it
-- runs this file, in every thread.
if wrk.path ~= "/" and string.sub(wrk.path, -1) == "/" then
   local prefix, seq = wrk.path, 0
   request = function()
      seq = seq + 1
      return wrk.format("GET", prefix .. seq)
   end
end

local NAMED = {}
for p in string.gmatch(os.getenv("TAILREACTOR_PERCENTILES") or "", "[^,%s]+") do
   NAMED[#NAMED + 1] = tonumber(p)
end
if #NAMED == 0 then
   io.stderr:write("tail_latency.lua: set TAILREACTOR_PERCENTILES, e.g. 50,99,99.9\n")
   os.exit(2)
end

-- wrk's latency histogram itself, for pooling runs (tailjob/pooled.py).
--
-- wrk's Lua API offers only latency(i), which rescans from the minimum on
-- every call; Debian's wrk is built with LuaJIT, whose ffi reads the
-- histogram directly.  The `latency` userdata holds a pointer to wrk's
-- `stats` struct (stats.h, wrk 4.x): count, limit, min, max, then one
-- counter per microsecond.  The buckets are printed only if what ffi reads
-- agrees with what the API says (min, max, and the counters adding up to
-- count); otherwise "histogram" is null and the job falls back to medians of
-- the runs' own percentiles.
local has_ffi, ffi = pcall(require, "ffi")
if has_ffi then
   has_ffi = pcall(ffi.cdef, [[
      typedef struct { uint64_t count; uint64_t limit; uint64_t min; uint64_t max; uint64_t data[]; }
         tailreactor_wrk_stats;
   ]])
end

-- The non-empty buckets as JSON pairs "[us,count]", or nil (see above).
local function histogram_buckets(latency)
   if not has_ffi or latency.max < latency.min then return nil end
   local ok, s = pcall(function() return ffi.cast("tailreactor_wrk_stats **", latency)[0] end)
   if not ok then return nil end
   local lo, hi = tonumber(s.min), tonumber(s.max)
   if lo ~= latency.min or hi ~= latency.max or hi >= tonumber(s.limit) then return nil end
   local out, total = {}, 0
   for v = lo, hi do
      local c = tonumber(s.data[v])
      if c > 0 then
         out[#out + 1] = "[" .. string.format("%d", v) .. "," .. string.format("%d", c) .. "]"
         total = total + c
      end
   end
   if total ~= tonumber(s.count) then return nil end
   return out
end

-- Spectrum points for the plot: 0 to 5 "nines" in steps of 0.1
-- (percentile = 100 * (1 - 10^-nines)), i.e. 50 points from p0 to p99.999.
local function spectrum_points()
   local points = {}
   for k = 0, 50 do
      points[#points + 1] = 100 * (1 - 10 ^ (-k / 10))
   end
   return points
end

-- How many samples the histogram holds (0 when empty).
--
-- wrk's Lua API has no count: `#latency` is the number of non-empty buckets
-- and `latency(i)` (value and count of the i-th non-empty bucket) scans from
-- the minimum on every call, so summing all buckets costs O(buckets x range)
-- -- minutes for a c1024 run whose latencies spread up to the timeout.
-- Instead, use wrk's percentile rule, rank(p) = round(p/100 * count + 0.5):
-- percentile(p) leaves the minimum bucket (m samples) exactly when
-- p >= 100 * m / count.  A bisection on p finds that threshold in ~64 cheap
-- calls (each stops one bucket above the minimum), and count = 100 * m / p.
local function sample_count(latency)
   if latency.max < latency.min then return 0 end   -- empty: min is UINT64_MAX
   local min, m = latency(1)
   if latency.max == min then return m end          -- every sample in one bucket
   local lo, hi = 0, 100                            -- percentile(lo) = min < percentile(hi)
   for _ = 1, 80 do
      local mid = (lo + hi) / 2
      if mid == lo or mid == hi then break end
      if latency:percentile(mid) > min then hi = mid else lo = mid end
   end
   return math.floor(100 * m / hi + 0.5)
end

-- Samples at or beyond the rank wrk reports as percentile p: the number of
-- observations the estimate rests on (count - rank + 1, wrk's rank rule).
local function samples_behind(count, p)
   if count == 0 then return 0 end
   local rank = math.floor(p / 100 * count + 0.5 + 0.5)
   return math.max(count - rank + 1, 0)
end

-- Integers as plain decimal digits (no exponent, no fraction).
local function int(x)
   return string.format("%d", x)
end

-- Floats with enough digits for microsecond means.
local function num(x)
   return string.format("%.3f", x)
end

local function ms(us)
   return string.format("%.3f", us / 1000)
end

local function pct(p)
   -- %.5g keeps 99.999 as "99.999" and 50 as "50".
   return string.format("%.5g", p)
end

done = function(summary, latency, requests)
   local empty = latency.max < latency.min
   local values = {}
   for i, p in ipairs(NAMED) do
      values[i] = empty and 0 or latency:percentile(p)
   end
   local samples = sample_count(latency)
   local min_us = empty and 0 or latency.min
   local max_us = empty and 0 or latency.max
   local mean_us = empty and 0 or latency.mean
   local stdev_us = empty and 0 or latency.stdev
   local seconds = summary.duration / 1e6
   local rps = seconds > 0 and summary.requests / seconds or 0
   local e = summary.errors

   io.write("------------------------------------------------------------\n")
   io.write(string.format("tail_latency.lua: %s requests in %.3f s, %s latency samples\n",
                          int(summary.requests), seconds, int(samples)))
   io.write(string.format("Requests/s: %.2f\n", rps))
   io.write(string.format("Latency ms: mean %s  min %s  max %s  stdev %s\n",
                          ms(mean_us), ms(min_us), ms(max_us), ms(stdev_us)))
   io.write("Percentile     Latency ms   Samples behind\n")
   local named = {}
   for i, p in ipairs(NAMED) do
      local behind = samples_behind(samples, p)
      io.write(string.format("P%-12s %10s   %s\n", pct(p), ms(values[i]), int(behind)))
      named[i] = '{"p":' .. pct(p) .. ',"us":' .. int(values[i])
         .. ',"samples":' .. int(behind) .. "}"
   end
   io.write(string.format("Errors: connect %d, read %d, write %d, status %d, timeout %d\n",
                          e.connect, e.read, e.write, e.status, e.timeout))

   local spectrum = {}
   for _, p in ipairs(spectrum_points()) do
      local us = empty and 0 or latency:percentile(p)
      spectrum[#spectrum + 1] = "[" .. string.format("%.6f", p) .. "," .. int(us) .. "]"
   end

   local buckets = histogram_buckets(latency)
   local json = "{"
      .. '"requests":' .. int(summary.requests)
      .. ',"duration_us":' .. int(summary.duration)
      .. ',"bytes":' .. int(summary.bytes)
      .. ',"latency_samples":' .. int(samples)
      .. ',"latency_us":{"min":' .. int(min_us) .. ',"max":' .. int(max_us)
      .. ',"mean":' .. num(mean_us) .. ',"stdev":' .. num(stdev_us) .. "}"
      .. ',"percentiles":[' .. table.concat(named, ",") .. "]"
      .. ',"spectrum":[' .. table.concat(spectrum, ",") .. "]"
      .. ',"histogram":' .. (buckets and ("[" .. table.concat(buckets, ",") .. "]") or "null")
      .. ',"errors":{"connect":' .. int(e.connect) .. ',"read":' .. int(e.read)
      .. ',"write":' .. int(e.write) .. ',"status":' .. int(e.status)
      .. ',"timeout":' .. int(e.timeout) .. "}"
      .. "}"
   io.write("TAILREACTOR_METRICS " .. json .. "\n")
end
