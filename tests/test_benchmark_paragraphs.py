"""`benchmarks.paragraphs`: its paragraphs are fixed draws of distinct test pairs."""

from benchmarks.paragraphs import paragraphs


def test_paragraphs_join_distinct_pairs_on_both_sides_the_same_way_every_time():
    pairs = [(f"e{i} .", f"f{i} .") for i in range(20)]
    lines = paragraphs(pairs, sentences=4, num=30, seed=1)
    assert len(lines) == 30 and lines == paragraphs(pairs, sentences=4, num=30, seed=1)
    for source, reference in lines:
        ids = source.replace(" .", "").split()
        assert len(set(ids)) == 4  # distinct pairs
        assert reference == " ".join(f"f{i[1:]} ." for i in ids)  # the same pairs, in order
    assert lines != paragraphs(pairs, sentences=4, num=30, seed=2)
