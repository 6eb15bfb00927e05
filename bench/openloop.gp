# bench/openloop.gp -- the open-loop section of `make bench` as a PNG: p99
# latency against the offered rate, log y, one line per server and kind of
# arrivals (solid: evenly spaced, dashed: Poisson), the median of the
# repeats with their range as error bars.
#
#   gnuplot -e "data='openloop.dat'; out='openloop-p99.png'; title='...'; \
#               tics='(\"2.5k\" 2500, \"5k\" 5000)'" bench/openloop.gp
#
# The data file (bench/report.py writes it) has one row per offered rate:
#   x  "label"  then for each of ioa, nchan-redis, nchan-mem, even then
#   poisson: p99-median p99-min p99-max ok
# in ms, NaN where no run left a figure; ok is 0 when a run of the point
# failed (errors, losses, or envelopes the generator could not send): the
# point is drawn as a cross, off the line, and BENCHMARKS.md's table says
# why.  pngcairo when this gnuplot has it, else libgd's png.

if (!exists("data"))  data = 'openloop.dat'
if (!exists("out"))   out = 'openloop-p99.png'
if (!exists("title")) title = ''
if (!exists("tics"))  tics = ''

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,560 font "sans,10" linewidth 1.5
} else {
    set terminal png size 900,560
}
set output out

set title title font ",12"
set logscale x 2
set logscale y 10
set grid xtics ytics mytics lc rgb "#dddddd"
set key outside right top vertical
set lmargin 12
set rmargin 30
set offsets graph 0.04, graph 0.04, 0, 0
if (tics ne '') { eval "set xtics nomirror ".tics } else { set xtics nomirror }
set xlabel "offered posts/s (100 rooms x 4 members, 200 B)"
set ylabel "p99 latency, ms (due time to receive)"
set format y "%g"

# the series' first column: server s (0 ioa, 1 nchan-redis, 2 nchan-mem),
# arrivals a (0 even, 1 poisson)
c(s, a) = 3 + 4 * (2 * s + a)
# the six series side by side around each rate, so their error bars do not
# hide one another (a few percent on the log axis)
dx(s, a) = 1 + 0.03 * (2 * s + a - 2.5)
good(v, ok) = (ok > 0.5) ? v : NaN
bad(v, ok) = (ok > 0.5) ? NaN : v

set style line 1 lc rgb "#1b7837" pt 7 ps 1.0 lw 2 dt 1
set style line 2 lc rgb "#1b7837" pt 6 ps 1.0 lw 2 dt 2
set style line 3 lc rgb "#c51b7d" pt 5 ps 0.9 lw 2 dt 1
set style line 4 lc rgb "#c51b7d" pt 4 ps 0.9 lw 2 dt 2
set style line 5 lc rgb "#2166ac" pt 9 ps 1.1 lw 2 dt 1
set style line 6 lc rgb "#2166ac" pt 8 ps 1.1 lw 2 dt 2

plot data using ($1*dx(0,0)):(good(column(c(0,0)), column(c(0,0)+3))):(column(c(0,0)+1)):(column(c(0,0)+2)) with yerrorlines ls 1 title "ioa, even", \
     ''   using ($1*dx(0,1)):(good(column(c(0,1)), column(c(0,1)+3))):(column(c(0,1)+1)):(column(c(0,1)+2)) with yerrorlines ls 2 title "ioa, Poisson", \
     ''   using ($1*dx(1,0)):(good(column(c(1,0)), column(c(1,0)+3))):(column(c(1,0)+1)):(column(c(1,0)+2)) with yerrorlines ls 3 title "nchan Redis, even", \
     ''   using ($1*dx(1,1)):(good(column(c(1,1)), column(c(1,1)+3))):(column(c(1,1)+1)):(column(c(1,1)+2)) with yerrorlines ls 4 title "nchan Redis, Poisson", \
     ''   using ($1*dx(2,0)):(good(column(c(2,0)), column(c(2,0)+3))):(column(c(2,0)+1)):(column(c(2,0)+2)) with yerrorlines ls 5 title "nchan memory, even", \
     ''   using ($1*dx(2,1)):(good(column(c(2,1)), column(c(2,1)+3))):(column(c(2,1)+1)):(column(c(2,1)+2)) with yerrorlines ls 6 title "nchan memory, Poisson", \
     ''   using ($1*dx(0,0)):(bad(column(c(0,0)), column(c(0,0)+3))) with points lc rgb "#1b7837" pt 2 ps 2.2 lw 2 title "a run failed", \
     ''   using ($1*dx(0,1)):(bad(column(c(0,1)), column(c(0,1)+3))) with points lc rgb "#1b7837" pt 2 ps 2.2 lw 2 notitle, \
     ''   using ($1*dx(1,0)):(bad(column(c(1,0)), column(c(1,0)+3))) with points lc rgb "#c51b7d" pt 2 ps 2.2 lw 2 notitle, \
     ''   using ($1*dx(1,1)):(bad(column(c(1,1)), column(c(1,1)+3))) with points lc rgb "#c51b7d" pt 2 ps 2.2 lw 2 notitle, \
     ''   using ($1*dx(2,0)):(bad(column(c(2,0)), column(c(2,0)+3))) with points lc rgb "#2166ac" pt 2 ps 2.2 lw 2 notitle, \
     ''   using ($1*dx(2,1)):(bad(column(c(2,1)), column(c(2,1)+3))) with points lc rgb "#2166ac" pt 2 ps 2.2 lw 2 notitle
