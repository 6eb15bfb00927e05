# bench/plot.gp -- one sweep of `make bench` as a PNG: deliveries/s above,
# p99 latency below, one line per server, against the swept parameter.
#
#   gnuplot -e "data='sweep-room.dat'; out='sweep-room.png'; \
#               xlab='members per room'; title='...'; \
#               tics='(\"1\" 1, \"2\" 2, \"4\" 4)'" bench/plot.gp
#
# The data file (bench/report.py writes it) has one row per point:
#   x  "label"  ioa/s ioa-p99  nchan-redis/s p99  nchan-mem/s p99  ok ok ok
# NaN where a run left no figure; ok is 0 for a run that failed (errors,
# losses): its figures are drawn as a cross, off the line, and
# BENCHMARKS.md's table says why.  pngcairo when this gnuplot has it, else
# libgd's png.

if (!exists("data"))  data = 'sweep-room.dat'
if (!exists("out"))   out = 'sweep-room.png'
if (!exists("xlab"))  xlab = ''
if (!exists("title")) title = ''
if (!exists("tics"))  tics = ''

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,820 font "sans,10" linewidth 1.5
} else {
    set terminal png size 900,820
}
set output out

set logscale x 2
set grid xtics ytics mytics lc rgb "#dddddd"
set key outside right top vertical
set lmargin 12
set rmargin 28
set offsets graph 0.04, graph 0.04, 0, 0
# the tics every point has, whether or not its runs left figures
if (tics ne '') { eval "set xtics nomirror ".tics } else { set xtics nomirror }

set style line 1 lc rgb "#1b7837" pt 7 ps 1.1 lw 2
set style line 2 lc rgb "#c51b7d" pt 5 ps 1.0 lw 2
set style line 3 lc rgb "#2166ac" pt 9 ps 1.2 lw 2

set multiplot layout 2,1 title title font ",12"

# good(v, ok): the value on the line only for a clean run; bad(): the cross
good(v, ok) = (ok > 0.5) ? v : NaN
bad(v, ok) = (ok > 0.5) ? NaN : v

set ylabel "deliveries/s"
set logscale y 10
set format y "%.0s%c"
set xlabel ""
plot data using 1:(good($3,$9)) with linespoints ls 1 title "ioa", \
     ''   using 1:(good($5,$10)) with linespoints ls 2 title "nchan, Redis store", \
     ''   using 1:(good($7,$11)) with linespoints ls 3 title "nchan, memory store", \
     ''   using 1:(bad($3,$9)) with points lc rgb "#1b7837" pt 2 ps 2.5 lw 2 title "failed run", \
     ''   using 1:(bad($5,$10)) with points lc rgb "#c51b7d" pt 2 ps 2.5 lw 2 notitle, \
     ''   using 1:(bad($7,$11)) with points lc rgb "#2166ac" pt 2 ps 2.5 lw 2 notitle

unset key
set ylabel "p99 latency, ms"
set format y "%g"
set xlabel xlab
plot data using 1:(good($4,$9)) with linespoints ls 1 title "ioa", \
     ''   using 1:(good($6,$10)) with linespoints ls 2 title "nchan, Redis store", \
     ''   using 1:(good($8,$11)) with linespoints ls 3 title "nchan, memory store", \
     ''   using 1:(bad($4,$9)) with points lc rgb "#1b7837" pt 2 ps 2.5 lw 2 title "failed run", \
     ''   using 1:(bad($6,$10)) with points lc rgb "#c51b7d" pt 2 ps 2.5 lw 2 notitle, \
     ''   using 1:(bad($8,$11)) with points lc rgb "#2166ac" pt 2 ps 2.5 lw 2 notitle

unset multiplot
